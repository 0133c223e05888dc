"""The fronts' own reads of the archive, beyond the Archiver's methods: dead letters per
stream and one key's series. Read-only; every statement takes bound parameters and
quoted names (:func:`archive.names.quote`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from archive.names import quote


def dead_letters(archive) -> dict[str, int]:
    """Rows refused at ingest, per stream, in the :class:`archive.Archiver` ``archive``."""
    with archive.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT stream, count(*) FROM moirae_dead_letters GROUP BY stream ORDER BY stream")
        return {s: n for s, n in cur.fetchall()}


def series(archive, stream: str, column: str, key_col: str, key: str, start: datetime,
           end: datetime) -> list[tuple[datetime, Any]]:
    """``(ts, column)`` of the rows of ``stream`` whose ``key_col`` is ``key`` (as text)
    with ``start <= ts <= end``, in time order; raises LookupError for an unknown stream."""
    ts, col, k = quote(archive.stream(stream).ts_col), quote(column), quote(key_col)
    with archive.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {ts}, {col} FROM {quote(stream)} WHERE {ts} >= %s AND {ts} <= %s "
                    f"AND {k}::text = %s ORDER BY {ts}", (start, end, key))
        return cur.fetchall()
