"""The Archiver (M 4.1): per-stream tables in PostgreSQL, range-partitioned by event
time with one partition per chunk of the global grid, a chunk catalog, exactly-once
appends, late rows and dead letters.

Tier transitions live in :mod:`archive.tiers`, history-queries in :mod:`archive.history`;
this module holds the registry and the write path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from psycopg2.extras import execute_values
from psycopg2.pool import ThreadedConnectionPool

from archive import history, tiers
from archive.abc import AppendResult, ChunkGrid, ChunkInfo, ChunkStore, HistoryQuery, Tier, UnknownStream
from archive.catalog_sql import CATALOG_DDL
from archive.copy import copy_csv, frame_to_csv
from archive.ids import source_ids
from archive.names import partition_name, quote
from archive.pg import Database
from archive.present import PresentCache
from archive.settings import ArchiveSettings
from archive.streams import RetentionPolicy, StreamSpec
from archive.types import ColumnType
from archive.validate import split_batch
from scheduler.errors import MoiraeError


class SchemaConflict(MoiraeError, ValueError):
    """A stream re-registered with a different schema."""


class Archiver(ChunkStore):
    """The PostgreSQL chunk store. Thread-safe: Spark's foreachBatch callbacks of several
    streaming queries may append at once."""

    def __init__(self, db: Database, settings: ArchiveSettings | None = None) -> None:
        self.db = db
        self.settings = settings or ArchiveSettings()
        self.grid = ChunkGrid(self.settings.chunk_span)
        self.present = PresentCache(self.settings.present_cache_rows)
        self._pool = ThreadedConnectionPool(1, 8, db.dsn, options=_options(db))
        self._lock = threading.RLock()
        self._append_locks: dict[str, threading.Lock] = {}
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(7340001)")  # one DDL writer at a time
            cur.execute(CATALOG_DDL)
        self._streams: dict[str, StreamSpec] = {}
        self._horizons: dict[str, datetime] = {}
        self._load()

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def _conn(self):
        """A pooled connection inside one transaction (committed on success)."""
        conn = self._pool.getconn()
        try:
            conn.autocommit = False
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            self._pool.putconn(conn)

    def connect(self):
        return self.db.connect()

    def close(self) -> None:
        self._pool.closeall()

    # -- registry ----------------------------------------------------------------------

    def _load(self) -> None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, ts_col, columns, kind, indexes, retention FROM moirae_streams")
            for name, ts_col, cols, kind, idx, ret in cur.fetchall():
                self._streams[name] = StreamSpec.build(
                    name, ts_col, {c: t for c, t in cols}, kind, [tuple(i) for i in idx],
                    RetentionPolicy.from_json(ret))
            cur.execute("SELECT key, value FROM moirae_archive_state WHERE key LIKE 'horizon:%%'")
            for key, value in cur.fetchall():
                self._horizons[key.split(":", 1)[1]] = datetime.fromisoformat(value)

    def register_stream(self, spec: StreamSpec) -> StreamSpec:
        """Create the stream's partitioned table (idempotent for the same schema)."""
        with self._lock:
            old = self._streams.get(spec.name)
            if old is not None:
                if (old.ts_col, old.columns) != (spec.ts_col, spec.columns):
                    raise SchemaConflict(
                        f"stream {spec.name!r} is archived with columns {_describe(old)}; "
                        f"cannot re-register it with {_describe(spec)}")
                if (old.indexes, old.retention, old.kind) != (spec.indexes, spec.retention, spec.kind):
                    self._save_spec(spec)
                    self._streams[spec.name] = spec
                return self._streams[spec.name]
            cols = ", ".join(f"{quote(c)} {t.value}" for c, t in spec.columns.items())
            ddl = (f"CREATE TABLE IF NOT EXISTS {quote(spec.name)} (_sid bigint NOT NULL, "
                   f"_batch bigint NOT NULL, {quote(spec.ts_col)} timestamptz NOT NULL"
                   f"{', ' + cols if cols else ''}) PARTITION BY RANGE ({quote(spec.ts_col)})")
            with self._conn() as conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(7340001)")
                cur.execute(ddl)
            self._save_spec(spec)
            self._streams[spec.name] = spec
            return spec

    def _save_spec(self, spec: StreamSpec) -> None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO moirae_streams (stream, ts_col, columns, kind, indexes, retention) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (stream) DO UPDATE SET "
                "kind = EXCLUDED.kind, indexes = EXCLUDED.indexes, retention = EXCLUDED.retention",
                (spec.name, spec.ts_col, json.dumps([[c, t.value] for c, t in spec.columns.items()]),
                 spec.kind, json.dumps([list(i) for i in spec.indexes]), json.dumps(spec.retention.to_json())))

    def stream(self, name: str) -> StreamSpec:
        try:
            return self._streams[name]
        except KeyError:
            known = ", ".join(sorted(self._streams)) or "none"
            raise UnknownStream(f"unknown stream {name!r} (archived streams: {known})") from None

    def streams(self) -> list[StreamSpec]:
        return list(self._streams.values())

    def horizon(self, stream: str) -> datetime | None:
        return self._horizons.get(stream)

    # -- the write path ----------------------------------------------------------------

    def append(self, stream: str, batch_id: int, data: pd.DataFrame | pa.Table, bulk: bool = False) -> AppendResult:
        """Archive one micro-batch exactly once.

        ``(stream, batch_id)`` is recorded in the same transaction as the rows, so a
        replayed batch is a no-op (``duplicate=True``). Malformed rows go to the
        dead-letter table with a reason; late rows (whose chunk has left the present
        tier) are archived into their chunk and counted. ``bulk`` loads history: new
        chunks start in the old tier and are not mirrored in memory (call ``age()``).
        """
        spec = self.stream(stream)
        with self._stream_lock(stream):  # one writer per stream: the memory mirror follows commit order
            return self._append(spec, batch_id, data, bulk)

    def _stream_lock(self, stream: str) -> threading.Lock:
        with self._lock:
            return self._append_locks.setdefault(stream, threading.Lock())

    def _append(self, spec: StreamSpec, batch_id: int, data, bulk: bool) -> AppendResult:
        stream = spec.name
        frame = data.to_pandas(types_mapper=_NULLABLE.get) if isinstance(data, pa.Table) else data
        good, dead = split_batch(frame, spec.ts_col, spec.columns, stream)
        if "_sid" not in good.columns:
            good["_sid"] = source_ids(stream, good, spec.id_columns)
        good["_batch"] = np.int64(batch_id)
        us = good[spec.ts_col].astype("int64").to_numpy() if len(good) else np.empty(0, dtype=np.int64)
        chunk_ids = np.floor_divide(us, self.grid.span_us)
        touched = sorted({int(c) for c in np.unique(chunk_ids)})
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO moirae_batches (stream, batch_id, rows, dead_letters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING batch_id", (stream, batch_id, len(good), len(dead)))
            if cur.fetchone() is None:
                conn.rollback()
                return AppendResult(stream, batch_id, 0, 0, 0, True, ())
            tiers_now = self._ensure_chunks(cur, spec, touched, bulk)
            late_per_chunk: dict[int, int] = {}
            rows_per_chunk: dict[int, int] = {}
            whole: set[int] = set()
            if len(good):
                ids, counts = np.unique(chunk_ids, return_counts=True)
                for cid, n in zip(ids.tolist(), counts.tolist(), strict=True):
                    rows_per_chunk[cid] = n
                    if tiers_now[cid] is not Tier.PRESENT and not bulk:
                        late_per_chunk[cid] = n
                cols = ["_sid", "_batch", *[c for c, _ in spec.id_columns]]
                types = [("_sid", ColumnType.BIGINT), ("_batch", ColumnType.BIGINT), *spec.id_columns]
                copy_csv(cur, stream, cols, frame_to_csv(good, types))
                totals = execute_values(
                    cur, "UPDATE moirae_chunks AS c SET rows = c.rows + v.n, late_rows = c.late_rows + v.l "
                    "FROM (VALUES %s) AS v(stream, cid, n, l) WHERE c.stream = v.stream AND c.chunk_id = v.cid "
                    "RETURNING c.chunk_id, c.rows",
                    [(stream, cid, n, late_per_chunk.get(cid, 0)) for cid, n in rows_per_chunk.items()],
                    template="(%s, %s::bigint, %s::bigint, %s::bigint)", page_size=100_000, fetch=True)
                # A present chunk whose rows are all in this batch can be mirrored whole.
                whole = {cid for cid, total in totals if total == rows_per_chunk.get(cid)}
            if dead:
                execute_values(cur, "INSERT INTO moirae_dead_letters (stream, batch_id, row_data, reason) VALUES %s",
                               [(stream, batch_id, json.dumps(d.row), d.reason) for d in dead])
        self._mirror(spec, good, chunk_ids, tiers_now, bulk, whole)
        newest = good[spec.ts_col].max().to_pydatetime() if len(good) else None
        return AppendResult(stream, batch_id, len(good), sum(late_per_chunk.values()), len(dead), False,
                            tuple(touched), newest)

    def _ensure_chunks(self, cur, spec: StreamSpec, chunk_ids: list[int], bulk: bool) -> dict[int, Tier]:
        """Create missing partitions and catalog rows; return every touched chunk's tier."""
        if not chunk_ids:
            return {}
        cur.execute("SELECT chunk_id, tier, dropped FROM moirae_chunks WHERE stream = %s AND chunk_id = ANY(%s)",
                    (spec.name, chunk_ids))
        found = {cid: (Tier(t), dropped) for cid, t, dropped in cur.fetchall()}
        horizon = self._horizons.get(spec.name)
        out: dict[int, Tier] = {}
        for cid in chunk_ids:
            if cid in found and not found[cid][1]:
                out[cid] = found[cid][0]
                continue
            start, end = self.grid.bounds(cid)
            tier = Tier.OLD if bulk or (horizon is not None and end <= horizon) else Tier.PRESENT
            part = partition_name(spec.name, cid)
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (spec.name,))
            cur.execute(f"CREATE TABLE IF NOT EXISTS {quote(part)} PARTITION OF {quote(spec.name)} "
                        "FOR VALUES FROM (%s) TO (%s)", (start, end))
            # Reset the counts only when reviving a dropped chunk: a concurrent writer may
            # have created this chunk (and counted its rows) since the SELECT above.
            cur.execute("INSERT INTO moirae_chunks (stream, chunk_id, start_ts, end_ts, tier) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, chunk_id) DO UPDATE "
                        "SET dropped = false, tier = EXCLUDED.tier, rows = 0, late_rows = 0 "
                        "WHERE moirae_chunks.dropped RETURNING tier", (spec.name, cid, start, end, tier.value))
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT tier FROM moirae_chunks WHERE stream = %s AND chunk_id = %s", (spec.name, cid))
                row = cur.fetchone()
            out[cid] = Tier(row[0])
        return out

    def _mirror(self, spec, good, chunk_ids, tiers_now, bulk, whole: set[int]) -> None:
        for cid, tier in tiers_now.items():
            if tier is not Tier.PRESENT or bulk:
                # a non-present chunk read through present_frame() must not stay stale
                self.present.invalidate(spec.name, cid)
            else:
                rows = good[chunk_ids == cid].drop(columns=["_batch"])
                self.present.add(spec.name, cid, rows, whole=cid in whole)

    # -- reads -------------------------------------------------------------------------

    def chunks(self, stream: str | None = None, tier: Tier | None = None, include_dropped: bool = False) -> list[ChunkInfo]:
        where, args = ["true"], []
        if stream is not None:
            self.stream(stream)
            where.append("stream = %s")
            args.append(stream)
        if tier is not None:
            where.append("tier = %s")
            args.append(Tier(tier).value)
        if not include_dropped:
            where.append("NOT dropped")
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, chunk_id, start_ts, end_ts, tier, rows, late_rows, indexes, materialized "
                        f"FROM moirae_chunks WHERE {' AND '.join(where)} ORDER BY chunk_id DESC, stream", args)
            return [ChunkInfo(s, c, st, en, Tier(t), r, lr, None, tuple(ix), tuple(m))
                    for s, c, st, en, t, r, lr, ix, m in cur.fetchall()]

    def chunk_ids(self, streams: Iterable[str]) -> list[int]:
        names = list(streams)
        for s in names:
            self.stream(s)
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT DISTINCT chunk_id FROM moirae_chunks WHERE stream = ANY(%s) AND NOT dropped "
                        "ORDER BY chunk_id DESC", (names,))
            return [r[0] for r in cur.fetchall()]

    def present_frame(self, stream: str, chunk_id: int) -> pd.DataFrame:
        """The rows of one chunk (``_sid``, event time, payload). A present chunk is held in
        memory once read (and kept up to date by appends); any other chunk is read from
        PostgreSQL each time."""
        spec = self.stream(stream)

        def load() -> pd.DataFrame:
            cols = ["_sid", *[c for c, _ in spec.id_columns]]
            with self._conn() as conn, conn.cursor() as cur:
                if not self._has_partition(cur, stream, chunk_id):
                    return pd.DataFrame(columns=cols)
                cur.execute(f"SELECT {', '.join(quote(c) for c in cols)} "
                            f"FROM {quote(partition_name(stream, chunk_id))}")
                return pd.DataFrame(cur.fetchall(), columns=cols)

        if self._tier(stream, chunk_id) is Tier.PRESENT:
            return self.present.get(stream, chunk_id, load)
        self.present.invalidate(stream, chunk_id)  # only present chunks are held in memory
        return load()

    def _tier(self, stream: str, chunk_id: int) -> Tier | None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT tier FROM moirae_chunks WHERE stream = %s AND chunk_id = %s AND NOT dropped",
                        (stream, chunk_id))
            row = cur.fetchone()
        return Tier(row[0]) if row else None

    def _has_partition(self, cur, stream: str, chunk_id: int) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (quote(partition_name(stream, chunk_id)),))
        return bool(cur.fetchone()[0])

    def read(self, stream: str, start: datetime, end: datetime, with_ids: bool = False) -> pd.DataFrame:
        """Rows of ``stream`` with ``start <= ts <= end`` (both inclusive), ordered by time.
        A plain read for the engine (contexts, replicas), not a user history-query."""
        spec = self.stream(stream)
        cols = [*(["_sid"] if with_ids else []), *[c for c, _ in spec.id_columns]]
        ts = quote(spec.ts_col)
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(quote(c) for c in cols)} FROM {quote(stream)} "
                        f"WHERE {ts} >= %s AND {ts} <= %s ORDER BY {ts}", (start, end))
            frame = pd.DataFrame(cur.fetchall(), columns=cols)
        if len(frame):
            frame[spec.ts_col] = pd.to_datetime(frame[spec.ts_col], utc=True)
        return frame

    def dead_letter(self, stream: str, row: Mapping[str, Any], reason: str) -> None:
        """Record one row refused after archiving (e.g. a context a query cannot use)."""
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_dead_letters (stream, batch_id, row_data, reason) VALUES (%s, NULL, %s, %s)",
                        (stream, json.dumps(row, default=str), reason))

    def dead_letters(self, stream: str | None = None, limit: int = 100) -> list[dict]:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, stream, batch_id, row_data, reason, at FROM moirae_dead_letters "
                        "WHERE %s IS NULL OR stream = %s ORDER BY id LIMIT %s", (stream, stream, limit))
            keys = ("id", "stream", "batch_id", "row", "reason", "at")
            return [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]

    def batch_ids(self, stream: str) -> list[int]:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT batch_id FROM moirae_batches WHERE stream = %s ORDER BY batch_id", (stream,))
            return [r[0] for r in cur.fetchall()]

    # -- tiers, retention, history (delegated) ----------------------------------------

    def demote(self, horizon: datetime, streams: Iterable[str] | None = None) -> list[tiers.Transition]:
        """Move every present chunk whose end is <= ``horizon`` to the recent tier."""
        return tiers.demote(self, horizon, streams)

    def age(self) -> list[tiers.Transition]:
        """Keep the newest R non-present chunks of each stream recent, the rest old."""
        return tiers.age(self)

    def apply_retention(self, contributing: tiers.Contributing | None = None) -> list[tiers.Transition]:
        return tiers.apply_retention(self, contributing)

    def status(self) -> dict[str, Any]:
        return tiers.status(self)

    def prepare(self, sql: str) -> HistoryQuery:
        return history.prepare(sql, set(self._streams))

    def run_history_query(self, query: HistoryQuery, params: Mapping[str, Any], chunk_id: int,
                          conn: Any = None, timeout_ms: int | None = None) -> pd.DataFrame:
        return history.run(self, query, params, chunk_id, conn, timeout_ms)


# Arrow -> pandas without going through float64: bigint ids above 2**53 would be rounded,
# and Spark's NaN would become indistinguishable from null.
_NULLABLE = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(),
             pa.bool_(): pd.BooleanDtype()}


def _options(db: Database) -> str | None:
    return f"-c search_path={db.schema},public" if db.schema else None


def _describe(spec: StreamSpec) -> str:
    return "{" + ", ".join(f"{c}: {t.value}" for c, t in [(spec.ts_col, ColumnType.TIMESTAMPTZ), *spec.columns.items()]) + "}"
