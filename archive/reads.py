"""Plain reads of an archive for the engine (not user history-queries): a chunk's rows,
a time range of a stream, dead letters and the batch log. Each takes the archive's
:class:`~archive.catalog.Catalog`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pandas as pd

from archive.abc import Tier
from archive.catalog import Catalog, has_partition
from archive.names import partition_name, quote
from archive.present import PresentCache
from archive.validate import storable


def chunk_frame(catalog: Catalog, present: PresentCache, stream: str, chunk_id: int) -> pd.DataFrame:
    """The rows of one chunk (``_sid``, event time, payload), empty for a chunk with no
    table. A present chunk is held in ``present`` once read (and kept up to date by
    appends); any other chunk is read from PostgreSQL each time."""
    spec = catalog.stream(stream)

    def load() -> pd.DataFrame:
        cols = ["_sid", *[c for c, _ in spec.id_columns]]
        with catalog.transaction() as conn, conn.cursor() as cur:
            if not has_partition(cur, partition_name(stream, chunk_id)):
                return pd.DataFrame(columns=cols)
            cur.execute(f"SELECT {', '.join(quote(c) for c in cols)} "
                        f"FROM {quote(partition_name(stream, chunk_id))}")
            return pd.DataFrame(cur.fetchall(), columns=cols)

    if catalog.tier(stream, chunk_id) is Tier.PRESENT:
        return present.get(stream, chunk_id, load)
    present.invalidate(stream, chunk_id)  # only present chunks are held in memory
    return load()


def time_range(catalog: Catalog, stream: str, start: datetime, end: datetime, with_ids: bool) -> pd.DataFrame:
    """Rows of ``stream`` with ``start <= ts <= end`` (both inclusive), ordered by time."""
    spec = catalog.stream(stream)
    cols = [*(["_sid"] if with_ids else []), *[c for c, _ in spec.id_columns]]
    ts = quote(spec.ts_col)
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(quote(c) for c in cols)} FROM {quote(stream)} "
                    f"WHERE {ts} >= %s AND {ts} <= %s ORDER BY {ts}", (start, end))
        frame = pd.DataFrame(cur.fetchall(), columns=cols)
    if len(frame):
        frame[spec.ts_col] = pd.to_datetime(frame[spec.ts_col], utc=True)
    return frame


def add_dead_letter(catalog: Catalog, stream: str, row: Mapping[str, Any], reason: str) -> None:
    """Record one row refused after archiving, with ``reason``; text PostgreSQL cannot
    hold is spelled as escapes."""
    safe = {storable(str(k)): storable(v) if isinstance(v, str) else v for k, v in row.items()}
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO moirae_dead_letters (stream, batch_id, row_data, reason) VALUES (%s, NULL, %s, %s)",
                    (stream, json.dumps(safe, default=str), storable(reason)))


def dead_letters(catalog: Catalog, stream: str | None, limit: int) -> list[dict]:
    """The first ``limit`` dead letters (of ``stream``, else of all), oldest first."""
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, stream, batch_id, row_data, reason, at FROM moirae_dead_letters "
                    "WHERE %s IS NULL OR stream = %s ORDER BY id LIMIT %s", (stream, stream, limit))
        keys = ("id", "stream", "batch_id", "row", "reason", "at")
        return [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]


def batch_ids(catalog: Catalog, stream: str) -> list[int]:
    """The batch log of ``stream``, ascending."""
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT batch_id FROM moirae_batches WHERE stream = %s ORDER BY batch_id", (stream,))
        return [r[0] for r in cur.fetchall()]


def batch_done(catalog: Catalog, stream: str, batch_id: int) -> bool:
    """Whether ``(stream, batch_id)`` is in the batch log (a replay is then a no-op)."""
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM moirae_batches WHERE stream = %s AND batch_id = %s", (stream, batch_id))
        return cur.fetchone() is not None
