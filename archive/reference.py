"""Reference tables: small relations without a time attribute, versioned (M 4.3).

The Archiver's history-queries join streams within one chunk, "or they can join streams
with small static relations that do not have any time attributes" (M 4.3): an inventory of
servers with their owner, team and rack, say. Such a table is loaded whole (from a CSV
file or a SELECT, :mod:`moirae.rules.reference`) and reloaded when it changes.

**Versions.** Every row is stored with the interval of time it is valid on,
``[_valid_from, _valid_to)`` (``_valid_to`` NULL while current). A load at time V
compares the new rows with the current ones by key: an unchanged row stays as it is; a
changed or removed row is closed at V; a new or changed row is inserted valid from V.
So a read *as of* time t sees exactly the rows that were current at t, and an alert's
history and context read the reference table as it was at the alert's event time: an
update never changes a past alert's context, nor a re-materialized one's. The first
load is valid from the beginning of time unless a ``valid_from`` is given (there was no
older knowledge); later loads default to now.

**Reading.** A history-query or SQL context-query names the table like a stream
(``JOIN servers s ON s.sid = h.sid``); :mod:`archive.history` replaces the name by the
rows valid at the bound parameter ``__as_of`` (:meth:`ReferenceTables.as_of_sql`), in the
same read-only transaction. The physical table is ``moirae_ref_<name>``; its columns are
fixed by the first load.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from archive.errors import ReferenceTableError
from archive.names import quote
from archive.schema import REFERENCE_DDL, reference_table_ddl, table_exists
from archive.types import ColumnType, coerce

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")
_RESERVED = {"_version", "_valid_from", "_valid_to"}
BEGINNING = datetime(1, 1, 1, tzinfo=UTC)
"""``valid_from`` of a first load given none: valid for every past event."""


def physical_name(name: str) -> str:
    """The table holding reference table ``name``'s versioned rows.

    >>> physical_name("servers")
    'moirae_ref_servers'
    """
    return f"moirae_ref_{name}"


@dataclass(frozen=True)
class ReferenceMeta:
    """A registered reference table: its key columns, its columns with their types, its
    current version (loads that changed something; 0 before the first)."""

    name: str
    key: tuple[str, ...]
    columns: tuple[tuple[str, ColumnType], ...]
    version: int

    @property
    def table(self) -> str:
        return physical_name(self.name)

    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)


def infer_type(values: pd.Series, column: str, where: str) -> ColumnType:
    """The archive type of a loaded column: bigint, double precision, boolean, timestamptz or text.

    >>> infer_type(pd.Series([1, 2]), "n", "t"), infer_type(pd.Series(["a", None]), "s", "t")
    (<ColumnType.BIGINT: 'bigint'>, <ColumnType.TEXT: 'text'>)
    """
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("integer",):
        return ColumnType.BIGINT
    if kind in ("floating", "mixed-integer-float", "decimal"):
        return ColumnType.DOUBLE
    if kind == "boolean":
        return ColumnType.BOOLEAN
    if kind in ("datetime64", "datetime"):
        return ColumnType.TIMESTAMPTZ
    if kind in ("string", "empty", "mixed", "bytes"):
        return ColumnType.TEXT
    raise ReferenceTableError(f"{where}: column {column!r} holds values of kind {kind!r}, which a reference "
                              "table cannot store (bigint, double, boolean, timestamp or text)")


class ReferenceTables:
    """The reference tables of one archive database (module doc). Thread-safe."""

    #: seconds the registry is remembered: a table loaded by another process (``moirae
    #: archive reference``) is seen by a running engine within this long
    TTL = 1.0

    def __init__(self, db) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._meta: dict[str, ReferenceMeta] | None = None
        self._read_at = 0.0

    # -- registry ------------------------------------------------------------------------

    def _ensure(self) -> dict[str, ReferenceMeta]:
        with self._lock:
            if self._meta is not None and time.monotonic() - self._read_at > self.TTL:
                self._meta = None
            if self._meta is None:
                self._read_at = time.monotonic()
                with self.db.connection() as conn, conn.cursor() as cur:
                    if not table_exists(cur, "moirae_reference_tables"):
                        self._meta = {}
                        return self._meta
                    cur.execute("SELECT name, key, columns, version FROM moirae_reference_tables")
                    self._meta = {n: ReferenceMeta(n, tuple(k), tuple((c, ColumnType(t)) for c, t in cols), v)
                                  for n, k, cols, v in cur.fetchall()}
            return self._meta

    def names(self) -> set[str]:
        """The registered reference tables' names."""
        return set(self._ensure())

    def meta(self, name: str) -> ReferenceMeta:
        meta = self._ensure().get(name)
        if meta is None:
            known = ", ".join(sorted(self._ensure())) or "none"
            raise ReferenceTableError(f"no reference table {name!r} (reference tables: {known})")
        return meta

    def refresh(self) -> None:
        """Forget the cached registry (another process loaded a table)."""
        with self._lock:
            self._meta = None

    # -- loading -------------------------------------------------------------------------

    def load(self, name: str, frame: pd.DataFrame, key=None, valid_from: datetime | None = None,
             source: str = "", streams: set[str] | frozenset[str] = frozenset(),
             first_line: int | None = None) -> dict[str, Any]:
        """Load ``frame`` as the new content of reference table ``name`` (created on its
        first load, with ``key``). Returns what changed: ``version``, ``rows``,
        ``inserted``, ``changed``, ``removed`` (a load that changes nothing makes no
        version). ``streams``: the archived streams' names, which a reference table may
        not take. ``first_line``: the file line of the first row (errors then name lines,
        not rows). Raises :class:`ReferenceTableError` naming the table and the problem."""
        where = f"reference table {name!r}" + (f" from {source}" if source else "")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ReferenceTableError(f"{where}: the name must be a SQL identifier of at most 48 characters "
                                      "(letters, digits, _; not starting with a digit)")
        if name in streams:
            raise ReferenceTableError(f"{where}: an archived stream is already named {name!r}")
        current = self._ensure().get(name)
        key = (key,) if isinstance(key, str) else tuple(key or (current.key if current else ()))
        if not key:
            raise ReferenceTableError(f"{where}: give its key (the column or columns that identify a row)")
        if current is not None and key != current.key:
            raise ReferenceTableError(f"{where}: key {list(key)} differs from its key {list(current.key)}")
        label = (lambda i: f"row {i + 1}") if first_line is None else (lambda i: f"line {i + first_line}")
        frame = self._checked(frame, key, where, label)
        columns = (current.columns if current is not None else
                   tuple((c, infer_type(frame[c], c, where)) for c in frame.columns))
        have, want = [c for c, _ in columns], list(frame.columns)
        if sorted(have) != sorted(want):
            raise ReferenceTableError(f"{where}: columns {want} differ from the table's columns {have} "
                                      "(a reference table keeps the columns of its first load)")
        rows = self._coerced(frame, columns, where, label)
        at = valid_from if valid_from is not None else (BEGINNING if current is None else datetime.now(UTC))
        at = pd.Timestamp(at).tz_localize("UTC").to_pydatetime() if pd.Timestamp(at).tzinfo is None else \
            pd.Timestamp(at).tz_convert("UTC").to_pydatetime()
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute(REFERENCE_DDL)
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('moirae_reference_' || %s))", (name,))
            if current is None:
                cur.execute(reference_table_ddl(physical_name(name), [(c, t.value) for c, t in columns], list(key)))
                cur.execute("INSERT INTO moirae_reference_tables (name, key, columns) VALUES (%s, %s, %s) "
                            "ON CONFLICT (name) DO NOTHING",
                            (name, json.dumps(list(key)), json.dumps([[c, t.value] for c, t in columns])))
            result = self._apply(cur, name, key, columns, rows, at, source)
        with self._lock:
            self._meta = None  # read again: columns and version
        return result

    @staticmethod
    def _checked(frame: pd.DataFrame, key: tuple[str, ...], where: str, label) -> pd.DataFrame:
        if not isinstance(frame, pd.DataFrame):
            raise ReferenceTableError(f"{where}: rows must be a table (a DataFrame), got {type(frame).__name__}")
        for c in frame.columns:
            if not isinstance(c, str) or not _NAME.match(c) or c in _RESERVED:
                raise ReferenceTableError(f"{where}: column name {c!r} is not a usable SQL identifier "
                                          f"(nor one of {sorted(_RESERVED)})")
        if len(set(frame.columns)) != len(frame.columns):
            raise ReferenceTableError(f"{where}: a column name appears twice: {list(frame.columns)}")
        missing = [k for k in key if k not in frame.columns]
        if missing:
            raise ReferenceTableError(f"{where}: key column {missing[0]!r} is not among its columns "
                                      f"{list(frame.columns)}")
        nulls = frame[list(key)].isna().any(axis=1)
        if nulls.any():
            i = int(nulls.to_numpy().nonzero()[0][0])
            raise ReferenceTableError(f"{where}: {label(i)} has no value for its key {list(key)}")
        dup = frame.duplicated(list(key), keep="first")
        if dup.any():
            i = int(dup.to_numpy().nonzero()[0][0])
            k = {c: frame[c].iloc[i] for c in key}
            raise ReferenceTableError(f"{where}: {label(i)} repeats key {k} of an earlier row")
        return frame.reset_index(drop=True)

    @staticmethod
    def _coerced(frame: pd.DataFrame, columns, where: str, label) -> list[tuple]:
        cols = {}
        for c, t in columns:
            values, bad = coerce(frame[c], t)
            if bad.any():
                i = int(bad.nonzero()[0][0])
                raise ReferenceTableError(f"{where}: {label(i)}, column {c!r}: {frame[c].iloc[i]!r} is not "
                                          f"a {t.value}")
            cols[c] = [_plain(v) for v in values.astype(object)]
        return list(zip(*(cols[c] for c, _ in columns), strict=True)) if columns else []

    def _apply(self, cur, name: str, key, columns, rows: list[tuple], at: datetime, source: str) -> dict[str, Any]:
        table = quote(physical_name(name))
        names = [c for c, _ in columns]
        cols = ", ".join(quote(c) for c in names)
        cur.execute("SELECT version FROM moirae_reference_tables WHERE name = %s FOR UPDATE", (name,))
        version = cur.fetchone()[0]
        cur.execute(f"SELECT max(_valid_from) FROM {table}")
        newest = cur.fetchone()[0]
        if newest is not None and at < newest:
            raise ReferenceTableError(f"reference table {name!r}: valid_from {at.isoformat()} is before its current "
                                      f"version's ({newest.isoformat()}); versions follow one another in time")
        cur.execute(f"SELECT {cols} FROM {table} WHERE _valid_to IS NULL")
        ki = [names.index(k) for k in key]
        old = {tuple(r[i] for i in ki): tuple(r) for r in cur.fetchall()}
        new = {tuple(r[i] for i in ki): r for r in rows}
        gone = [k for k in old if k not in new or not _same(old[k], new[k])]
        added = [k for k in new if k not in old or not _same(old[k], new[k])]
        changed = sum(1 for k in added if k in old)
        if not gone and not added:
            return {"name": name, "version": version, "rows": len(rows), "inserted": 0, "changed": 0, "removed": 0}
        version += 1
        match = " AND ".join(f"{quote(k)} = %s" for k in key)
        for k in gone:
            cur.execute(f"UPDATE {table} SET _valid_to = %s WHERE _valid_to IS NULL AND {match}", (at, *k))
        if added:
            marks = ", ".join(["%s"] * (len(names) + 2))
            cur.executemany(f"INSERT INTO {table} (_version, _valid_from, {cols}) VALUES ({marks})",
                            [(version, at, *new[k]) for k in added])
        result = {"name": name, "version": version, "rows": len(rows), "inserted": len(added) - changed,
                  "changed": changed, "removed": len(gone) - changed}
        cur.execute("INSERT INTO moirae_reference_versions (name, version, valid_from, source, rows, inserted, "
                    "changed, removed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    (name, version, at, source or None, len(rows), result["inserted"], changed, result["removed"]))
        cur.execute("UPDATE moirae_reference_tables SET version = %s, updated_at = now() WHERE name = %s",
                    (version, name))
        return result

    # -- reading -------------------------------------------------------------------------

    def as_of_sql(self, name: str, param: str = "__as_of") -> str:
        """A subquery of ``name``'s rows valid at the bound parameter ``param`` (psycopg2
        ``%(param)s`` style), with the table's own columns only."""
        meta = self.meta(name)
        cols = ", ".join(quote(c) for c in meta.column_names())
        p = f"%({param})s"
        return (f"(SELECT {cols} FROM {quote(meta.table)} WHERE _valid_from <= {p} "
                f"AND (_valid_to IS NULL OR _valid_to > {p}))")

    def rows(self, name: str, as_of: datetime | None = None) -> pd.DataFrame:
        """The rows valid at ``as_of`` (default: the current ones)."""
        meta = self.meta(name)
        cols = ", ".join(quote(c) for c in meta.column_names())
        with self.db.connection() as conn, conn.cursor() as cur:
            if as_of is None:
                cur.execute(f"SELECT {cols} FROM {quote(meta.table)} WHERE _valid_to IS NULL")
            else:
                cur.execute(f"SELECT * FROM {self.as_of_sql(name)} AS r", {"__as_of": as_of})
            return pd.DataFrame(cur.fetchall(), columns=list(meta.column_names()))

    def change_times(self, names) -> list[datetime]:
        """Every instant at which one of ``names``' content changed, ascending: between
        two consecutive ones, a read as of any time sees the same rows."""
        parts = [f"SELECT _valid_from AS t FROM {quote(self.meta(n).table)} UNION "
                 f"SELECT _valid_to FROM {quote(self.meta(n).table)} WHERE _valid_to IS NOT NULL" for n in names]
        if not parts:
            return []
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT DISTINCT t FROM ({' UNION '.join(parts)}) AS x ORDER BY t")
            return [r[0] for r in cur.fetchall()]

    def versions(self, name: str) -> list[dict[str, Any]]:
        """The loads of ``name`` that made a version, oldest first."""
        self.meta(name)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT version, valid_from, loaded_at, source, rows, inserted, changed, removed "
                        "FROM moirae_reference_versions WHERE name = %s ORDER BY version", (name,))
            keys = ("version", "valid_from", "loaded_at", "source", "rows", "inserted", "changed", "removed")
            return [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]

    def status(self) -> list[dict[str, Any]]:
        """Each reference table: name, key, columns, version."""
        return [{"name": m.name, "key": list(m.key), "columns": {c: t.value for c, t in m.columns},
                 "version": m.version} for m in sorted(self._ensure().values(), key=lambda m: m.name)]


def _plain(v: Any) -> Any:
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if hasattr(v, "item"):
        return v.item()
    return v


def _same(a: tuple, b: tuple) -> bool:
    return all(x == y or (x is None and y is None) for x, y in zip(a, b, strict=True))
