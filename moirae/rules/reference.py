"""Reference tables loaded from a CSV file or a SELECT (M 4.3), into the archive's
versioned tables (:mod:`archive.reference`).

A CSV file has a header row; column types are inferred from the values (bigint, double
precision, boolean, timestamptz, text) on the first load and kept after. A SELECT runs
read-only, under the history-query rules against writes and escapes (one statement, no
DML, no ``set_config`` ...) and the statement timeout, on the engine's PostgreSQL or on
the one ``dsn`` names; it may read any table there (an inventory, say).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

import pandas as pd

from archive import history
from archive.errors import ReferenceTableError, UnsafeQuery


def read_csv(path: str | os.PathLike, name: str) -> pd.DataFrame:
    """The rows of a CSV file with a header row; errors name the table and the file's line."""
    where = f"reference table {name!r} from {os.fspath(path)}"
    try:
        return pd.read_csv(path, skipinitialspace=True, keep_default_na=True)
    except FileNotFoundError:
        raise ReferenceTableError(f"{where}: no such file") from None
    except pd.errors.EmptyDataError:
        raise ReferenceTableError(f"{where}: the file is empty (a header row is needed)") from None
    except pd.errors.ParserError as exc:
        raise ReferenceTableError(f"{where}: {str(exc).strip().splitlines()[0]}") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ReferenceTableError(f"{where}: cannot be read: {exc}") from None


def read_sql(archiver, sql: str, name: str, dsn: str | None = None) -> pd.DataFrame:
    """The rows of one read-only SELECT (module doc)."""
    where = f"reference table {name!r}"
    try:
        history._parse(sql)  # one SELECT, nothing that writes or escapes
    except UnsafeQuery as exc:
        raise ReferenceTableError(f"{where}: {str(exc).replace('history-query', 'its SQL')}") from None
    text = sql.replace("%", "%%")
    if dsn is None:
        names, _types, rows = archiver.db.retry(
            lambda: history.read_only(archiver.catalog, text, {}, f"{where} SQL", sql), f"{where} SQL")
    else:
        import psycopg2

        try:
            conn = psycopg2.connect(dsn)
        except psycopg2.Error as exc:
            raise ReferenceTableError(f"{where}: cannot connect to its dsn: {str(exc).strip()}") from None
        try:
            names, _types, rows = history.read_only(archiver.catalog, text, {}, f"{where} SQL", sql, conn)
        finally:
            conn.close()
    return pd.DataFrame(rows, columns=names)


def load(archiver, name: str, csv: str | os.PathLike | None = None, sql: str | None = None,
         key: Any = None, valid_from: datetime | str | None = None, dsn: str | None = None) -> dict[str, Any]:
    """Load (or reload) reference table ``name`` from exactly one of ``csv`` and ``sql``."""
    if (csv is None) == (sql is None):
        raise ReferenceTableError(f"reference table {name!r}: give exactly one of csv= and sql=")
    if valid_from is not None:
        try:
            valid_from = pd.Timestamp(valid_from)
        except (ValueError, TypeError):
            raise ReferenceTableError(f"reference table {name!r}: valid_from {valid_from!r} is not a time") from None
        valid_from = (valid_from.tz_localize("UTC") if valid_from.tzinfo is None else valid_from).to_pydatetime()
    if csv is not None:
        frame, source, first = read_csv(csv, name), os.fspath(csv), 2
    else:
        frame, source, first = read_sql(archiver, sql, name, dsn), "SQL", None
    streams = {s.name for s in archiver.streams()}
    return archiver.references.load(name, frame, key, valid_from, source, streams, first_line=first)
