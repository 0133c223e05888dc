"""The Archiver (M 4.1): per-stream tables in PostgreSQL, range-partitioned by event
time with one partition per chunk of the stream's own interval, a chunk catalog,
exactly-once appends, late rows and dead letters.

Chunk layout (intervals, creation) lives in :mod:`archive.chunks`, tier transitions in
:mod:`archive.tiers`, history-queries in :mod:`archive.history`; this module holds the
registry and the write path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from psycopg2.extras import execute_values

from archive import chunks, history, simindex, tiers
from archive.abc import AppendResult, ChunkGrid, ChunkInfo, ChunkStore, HistoryQuery, Tier, UnknownStream
from archive.catalog_sql import CATALOG_DDL
from archive.copy import copy_binary, frame_to_copy_binary
from archive.exec_sink import PARTS_DDL
from archive.ids import source_ids
from archive.index_claims import IndexClaims
from archive.materialized import supersede
from archive.names import partition_name, quote
from archive.pg import Database
from archive.present import PresentCache
from archive.settings import ArchiveSettings
from archive.streams import RetentionPolicy, StreamSpec
from archive.types import ColumnType
from archive.validate import insert_dead_letters, split_batch, storable
from moirae.base.errors import MoiraeError


class SchemaConflict(MoiraeError, ValueError):
    """A stream re-registered with a different schema."""


MAX_CHUNKS_PER_BATCH = 512
"""Chunks one appended batch may touch: its COPY locks each touched partition until commit,
and PostgreSQL's shared lock table holds max_locks_per_transaction (64) x max_connections."""


class BatchTooWide(MoiraeError, ValueError):
    """A batch spanning more chunks than one transaction may lock; names stream, batch and span."""


class Archiver(ChunkStore):
    """The PostgreSQL chunk store. Thread-safe: Spark's foreachBatch callbacks of several
    streaming queries may append at once."""

    def __init__(self, db: Database, settings: ArchiveSettings | None = None) -> None:
        self.db = db
        self.settings = settings or ArchiveSettings()
        self.grid = ChunkGrid(self.settings.chunk_span)
        self.present = PresentCache(self.settings.present_cache_rows)
        self._lock = threading.RLock()
        self._append_locks: dict[str, threading.Lock] = {}
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(7340001)")  # one DDL writer at a time
            cur.execute(CATALOG_DDL)
            cur.execute(PARTS_DDL)
        self._streams: dict[str, StreamSpec] = {}
        self._horizons: dict[str, datetime] = {}
        self._intervals: dict[str, timedelta] = {}
        self._task_ids = chunks.TaskIdCache()
        self._cluster: dict[str, tuple[str, ...]] = {}
        #: the BRIN time indexes this process reads through, kept from other processes' drops
        self.index_claims = IndexClaims(db)
        self._load()

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def _conn(self):
        """A pooled connection inside one transaction, committed on success
        (:meth:`archive.pg.Database.connection`)."""
        with self.db.connection(autocommit=False) as conn:
            yield conn

    def connect(self):
        return self.db.connect()

    def close(self) -> None:
        self.index_claims.close()
        self.db.close()

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
            # streams archived before intervals were per stream used chunk_span
            cur.execute("UPDATE moirae_streams s SET chunk_us = %s WHERE chunk_us IS NULL AND EXISTS "
                        "(SELECT 1 FROM moirae_chunks c WHERE c.stream = s.stream)", (self.grid.span_us,))
            self._intervals.update(chunks.load_intervals(cur))

    def register_stream(self, spec: StreamSpec, chunk_interval: timedelta | None = None) -> StreamSpec:
        """Create the stream's partitioned table (idempotent for the same schema).
        ``chunk_interval`` fixes the stream's chunk interval now (else its first batch
        does, see :meth:`fix_interval`); a stream's interval never changes."""
        with self._lock:
            spec = self._register(spec)
        if chunk_interval is not None:
            chunks.set_interval(self, spec.name, chunk_interval)
        return spec

    def _register(self, spec: StreamSpec) -> StreamSpec:
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

    def cluster_by(self, stream: str, keys: tuple[str, ...]) -> tuple[str, ...]:
        """Ask for the executors to write the stream's rows sorted by ``keys`` within each
        chunk of a micro-batch partition (:mod:`archive.contributors`); the first keys
        asked for in this process win. Returns the stream's cluster keys."""
        with self._lock:
            return self._cluster.setdefault(stream, tuple(keys)) if keys else self.cluster_keys(stream)

    def cluster_keys(self, stream: str) -> tuple[str, ...]:
        """The columns the stream's rows are written sorted by, or ()."""
        return self._cluster.get(stream, ())

    def horizon(self, stream: str) -> datetime | None:
        return self._horizons.get(stream)

    # -- the write path ----------------------------------------------------------------

    def append(self, stream: str, batch_id: int, data: pd.DataFrame | pa.Table, bulk: bool = False,
               key: str | None = None) -> AppendResult:
        """Archive one micro-batch exactly once.

        ``(stream, batch_id)`` is recorded in the same transaction as the rows, so a
        replayed batch is a no-op (``duplicate=True``). Malformed rows go to the
        dead-letter table with a reason; late rows (whose chunk has left the present
        tier) are archived into their chunk and counted. ``bulk`` loads history: new
        chunks start in the old tier and are not mirrored in memory (call ``age()``).
        ``key`` (a live event or context stream's event id) makes the batch's rows
        supersede replica rows of the same key in their chunks
        (:func:`archive.materialized.supersede`).
        """
        spec = self.stream(stream)
        if key is not None and key not in spec.columns:
            raise ValueError(f"append to {stream!r}: key {key!r} is not one of its columns {list(spec.columns)}")
        with self._stream_lock(stream):  # one writer per stream: the memory mirror follows commit order
            # a lost connection rolled the transaction back (or committed it, and the batch
            # log makes the retry a no-op): the whole append is retried through an outage
            return self.db.retry(lambda: self._append(spec, batch_id, data, bulk, key), f"append to {stream!r}")

    def _stream_lock(self, stream: str) -> threading.Lock:
        with self._lock:
            return self._append_locks.setdefault(stream, threading.Lock())

    def _append(self, spec: StreamSpec, batch_id: int, data, bulk: bool, key: str | None) -> AppendResult:
        stream = spec.name
        frame = data.to_pandas(types_mapper=_NULLABLE.get) if isinstance(data, pa.Table) else data
        good, dead = split_batch(frame, spec.ts_col, spec.columns, stream)
        if "_sid" not in good.columns:
            good["_sid"] = source_ids(stream, good, spec.id_columns)
        good["_batch"] = np.int64(batch_id)
        keys = self.cluster_keys(stream)
        if keys and len(good) > 1:  # each chunk's rows sorted by them, as the executors write (archive.contributors)
            good = good.sort_values(list(keys), kind="stable", ignore_index=True)
        us = good[spec.ts_col].astype("int64").to_numpy() if len(good) else np.empty(0, dtype=np.int64)
        grid = (self.fix_interval(stream, len(us), timedelta(microseconds=int(us.max() - us.min())))
                if len(us) else self.grid_of(stream))
        chunk_ids = np.floor_divide(us, grid.span_us)
        touched = sorted({int(c) for c in np.unique(chunk_ids)})
        if len(touched) > MAX_CHUNKS_PER_BATCH:
            raise BatchTooWide(f"batch {batch_id} of stream {stream!r} spans {len(touched)} chunks of "
                               f"{grid.span}; one transaction may write at most {MAX_CHUNKS_PER_BATCH} "
                               "(PostgreSQL's lock table): send smaller batches or set a larger archive.chunk_span")
        chunks.ensure_chunks(self, spec, touched, bulk)  # creation in short transactions of its own
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO moirae_batches (stream, batch_id, rows, dead_letters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING batch_id", (stream, batch_id, len(good), len(dead)))
            if cur.fetchone() is None:
                conn.rollback()
                return AppendResult(stream, batch_id, 0, 0, 0, True, ())
            tiers_now = chunks.create_in(self, cur, spec, touched, bulk)
            late_per_chunk: dict[int, int] = {}
            rows_per_chunk: dict[int, int] = {}
            superseded: dict[int, int] = {}
            whole: set[int] = set()
            if len(good):
                if key is not None:
                    keys = good[key].to_numpy()
                    superseded = supersede(cur, stream, key, {c: keys[chunk_ids == c] for c in touched})
                ids, counts = np.unique(chunk_ids, return_counts=True)
                for cid, n in zip(ids.tolist(), counts.tolist(), strict=True):
                    rows_per_chunk[cid] = n
                    if tiers_now[cid] is not Tier.PRESENT and not bulk:
                        late_per_chunk[cid] = n
                types = spec.stored_columns
                cols = [c for c, _ in types]
                copy_binary(cur, stream, cols, frame_to_copy_binary(good, types))
                totals = execute_values(  # the rows superseded leave the count
                    cur, "UPDATE moirae_chunks AS c SET rows = c.rows + v.n, late_rows = c.late_rows + v.l "
                    "FROM (VALUES %s) AS v(stream, cid, n, l) WHERE c.stream = v.stream AND c.chunk_id = v.cid "
                    "RETURNING c.chunk_id, c.rows",
                    [(stream, cid, n - superseded.get(cid, 0), late_per_chunk.get(cid, 0))
                     for cid, n in rows_per_chunk.items()],
                    template="(%s, %s::bigint, %s::bigint, %s::bigint)", page_size=100_000, fetch=True)
                # A present chunk whose rows are all in this batch can be mirrored whole.
                whole = {cid for cid, total in totals if total == rows_per_chunk.get(cid)}
            if dead:
                insert_dead_letters(cur, stream, batch_id, dead)
        self._mirror(spec, good, chunk_ids, tiers_now, bulk, whole)
        for cid in superseded:  # the mirror may hold the replica rows just deleted: reload from SQL
            self.present.invalidate(stream, cid)
        simindex.invalidate(self, stream, rows_per_chunk)  # a chunk's similarity index is of its old rows
        newest = good[spec.ts_col].max().to_pydatetime() if len(good) else None
        return AppendResult(stream, batch_id, len(good), sum(late_per_chunk.values()), len(dead), False,
                            tuple(touched), newest)

    # -- chunk layout (archive.chunks) -------------------------------------------------

    def grid_of(self, stream: str) -> ChunkGrid:
        """The stream's own chunk grid: its recorded interval, else its configured one,
        else ``chunk_span`` (until its first batch fixes it)."""
        span = self._intervals.get(stream) or self.settings.chunk_intervals.get(stream)
        return ChunkGrid(span) if span else self.grid

    def grid_for(self, streams: Iterable[str]) -> ChunkGrid:
        """The task grid of a history-query over ``streams`` (their coarsest interval)."""
        return chunks.task_grid(self, streams)

    def fix_interval(self, stream: str, rows: int, span: timedelta) -> ChunkGrid:
        """The stream's grid, choosing and recording its interval first if none is fixed:
        configured, else from ``rows`` over ``span`` (raw streams, with
        ``chunk_target_rows`` set), else ``chunk_span``."""
        return chunks.fix_interval(self, stream, rows, span)

    def ensure_chunks(self, stream: str, chunk_ids: Iterable[int], bulk: bool = False) -> dict[int, Tier]:
        """Create the missing chunks of ``stream`` among ``chunk_ids`` (its own grid), in
        transactions of at most ``archive.chunks.CHUNKS_PER_TRANSACTION``; their tiers."""
        self.fix_interval(stream, 0, timedelta(0))
        return chunks.ensure_chunks(self, self.stream(stream), chunk_ids, bulk)

    def ensure_span(self, stream: str, min_ts: datetime, max_ts: datetime, bulk: bool = False,
                    rows: int | None = None) -> dict[int, Tier]:
        """Ensure the chunks covering ``[min_ts, max_ts]`` of ``stream`` exist, with bounded
        locks per transaction (see :func:`archive.chunks.ensure_span`)."""
        return chunks.ensure_span(self, stream, min_ts, max_ts, bulk, rows)

    # -- the executor write path (archive.exec_sink) -----------------------------------

    def has_interval(self, stream: str) -> bool:
        """Whether ``stream``'s chunk interval is fixed (recorded in the catalog)."""
        return stream in self._intervals

    def interval_from_rate(self, stream: str) -> bool:
        """Whether ``stream``'s interval is not fixed yet and will be chosen from the rate
        of its first rows (see :func:`archive.chunks.rate_based`)."""
        return chunks.rate_based(self, stream)

    def batch_done(self, stream: str, batch_id: int) -> bool:
        """Whether ``(stream, batch_id)`` is in the batch log (a replay is then a no-op)."""
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT 1 FROM moirae_batches WHERE stream = %s AND batch_id = %s", (stream, batch_id))
            return cur.fetchone() is not None

    def commit_parts(self, stream: str, batch_id: int) -> AppendResult:
        """Commit a micro-batch whose partitions the executors have archived
        (:mod:`archive.exec_sink`): in one transaction, log the batch, add its
        per-partition counts to the chunk catalog and forget the partition records.
        The present mirror drops the touched chunks; their next read goes to SQL."""
        spec = self.stream(stream)
        with self._stream_lock(stream), self._conn() as conn, conn.cursor() as cur:
            cur.execute("SELECT rows, dead_letters, chunks, max_us FROM moirae_batch_parts "
                        "WHERE stream = %s AND batch_id = %s", (stream, batch_id))
            parts = cur.fetchall()
            rows = sum(p[0] for p in parts)
            dead = sum(p[1] for p in parts)
            newest = max((p[3] for p in parts if p[3] is not None), default=None)
            per_chunk: dict[int, int] = {}
            late: dict[int, int] = {}
            for _, _, chunks, _ in parts:
                for cid, (n, lt) in chunks.items():
                    per_chunk[int(cid)] = per_chunk.get(int(cid), 0) + n
                    late[int(cid)] = late.get(int(cid), 0) + lt
            cur.execute(
                "INSERT INTO moirae_batches (stream, batch_id, rows, dead_letters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING batch_id", (stream, batch_id, rows, dead))
            if cur.fetchone() is None:
                conn.rollback()
                return AppendResult(stream, batch_id, 0, 0, 0, True, ())
            if per_chunk:
                execute_values(
                    cur, "UPDATE moirae_chunks AS c SET rows = c.rows + v.n, late_rows = c.late_rows + v.l "
                    "FROM (VALUES %s) AS v(stream, cid, n, l) WHERE c.stream = v.stream AND c.chunk_id = v.cid",
                    [(stream, cid, n, late.get(cid, 0)) for cid, n in per_chunk.items()],
                    template="(%s, %s::bigint, %s::bigint, %s::bigint)", page_size=100_000)
            cur.execute("DELETE FROM moirae_batch_parts WHERE stream = %s AND batch_id = %s", (stream, batch_id))
        for cid in per_chunk:
            self.present.invalidate(spec.name, cid)
        max_ts = None if newest is None else datetime.fromtimestamp(0, UTC) + timedelta(microseconds=newest)
        return AppendResult(stream, batch_id, rows, sum(late.values()), dead, False, tuple(sorted(per_chunk)), max_ts)

    def _ensure_chunks(self, cur, spec: StreamSpec, chunk_ids: list[int], bulk: bool) -> dict[int, Tier]:
        return chunks.create_in(self, cur, spec, chunk_ids, bulk)

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
        """Task ids (on :meth:`grid_for` of ``streams``) holding data of any of them, newest first."""
        names = list(streams)
        for s in names:
            self.stream(s)
        return self._task_ids.get(self, names)

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
                        (stream, json.dumps(_safe_row(row), default=str), storable(reason)))

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
        out = tiers.status(self)
        out["database"] = self.db.outages()  # reachability: the outage under way and the recorded ones
        return out

    def prepare(self, sql: str) -> HistoryQuery:
        return history.prepare(sql, set(self._streams))

    def run_history_query(self, query: HistoryQuery, params: Mapping[str, Any], chunk_id: int,
                          conn: Any = None, timeout_ms: int | None = None) -> pd.DataFrame:
        return history.run(self, query, params, chunk_id, conn, timeout_ms)


# Arrow -> pandas without going through float64: bigint ids above 2**53 would be rounded,
# and Spark's NaN would become indistinguishable from null.
_NULLABLE = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(),
             pa.bool_(): pd.BooleanDtype()}


def _safe_row(row: Mapping[str, Any]) -> dict:
    """A dead letter's row with text PostgreSQL cannot hold spelled as escapes."""
    return {storable(str(k)): storable(v) if isinstance(v, str) else v for k, v in row.items()}


def _describe(spec: StreamSpec) -> str:
    return "{" + ", ".join(f"{c}: {t.value}" for c, t in [(spec.ts_col, ColumnType.TIMESTAMPTZ), *spec.columns.items()]) + "}"
