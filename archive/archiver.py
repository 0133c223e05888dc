"""The Archiver (M 4.1): the PostgreSQL chunk store. Per-stream tables range-partitioned
by event time, one partition per chunk of the stream's own interval, a chunk catalog,
exactly-once appends, late rows and dead letters.

The Archiver is a facade over small parts, each handed only what it uses:

- :class:`archive.catalog.Catalog`: the registry (streams, intervals, horizons, cluster
  keys) and catalog reads, with the schema check on open (:mod:`archive.schema`);
- :mod:`archive.chunks`: chunk layout and creation;
- :class:`archive.writes.Writes`: the driver's write path;
- :mod:`archive.reads`: plain reads; :mod:`archive.history`: history-queries;
- :mod:`archive.tiers`: tier transitions, retention, status.

The Spark side (the sink adapter and the executors' writers) lives in
:mod:`archive.spark_sink`, :mod:`archive.exec_sink` and :mod:`archive.exec_stream`, and
only those import ``pyspark``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
import pyarrow as pa

from archive import chunk_copy, chunks, history, reads, simindex, tiers
from archive.abc import AppendResult, ChunkGrid, ChunkInfo, ChunkStore, HistoryQuery, Tier
from archive.catalog import Catalog
from archive.drop import drop_stream_sql
from archive.index_claims import IndexClaims
from archive.pg import Database
from archive.present import PresentCache
from archive.reference import ReferenceTables
from archive.row_flags import RowFlags
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from archive.writes import Writes

if TYPE_CHECKING:
    from archive.chunk_copy import Read

T = TypeVar("T")

log = logging.getLogger(__name__)


class Archiver(ChunkStore):
    """The PostgreSQL chunk store. Thread-safe: Spark's foreachBatch callbacks of several
    streaming queries may append at once. Opening it checks the database's schema
    version (:func:`archive.schema.open_schema`)."""

    def __init__(self, db: Database, settings: ArchiveSettings | None = None) -> None:
        self.db = db
        self.settings = settings or ArchiveSettings()
        self.catalog = Catalog(db, self.settings)
        self.grid = self.catalog.grid
        self.present = PresentCache(self.settings.present_cache_rows)
        self.writes = Writes(self.catalog, self.present)
        self._task_ids = chunks.TaskIdCache()
        #: the BRIN time indexes this process reads through, kept from other processes' drops
        self.index_claims = IndexClaims(db)
        #: versioned tables without a time attribute, read as of an event's time (archive.reference)
        self.references = ReferenceTables(db)
        #: where the flags of rows marked bad come from (archive.row_flags; set by the engine):
        #: history-queries read a flagged stream through them
        self.row_flags: RowFlags | None = None
        #: per stream, what brings the BRIN summaries of its chunks in an event-time span up
        #: to date (``Summarizer.now`` of :mod:`archive.brin_summary`, registered by the
        #: stream's live window reader, moirae.ingest.window_provenance): a history-query
        #: reaching the stream's present chunks calls it first (:meth:`run_history_query`)
        self.summarizers: dict[str, Callable[[datetime, datetime], int]] = {}

    # -- connections -------------------------------------------------------------------

    def connect(self):
        return self.db.connect()

    def retry(self, fn: Callable[[], T], what: str, on_lost: Callable[[], Any] | None = None) -> T:
        return self.db.retry(fn, what, on_lost=on_lost)

    def close(self) -> None:
        self.index_claims.close()
        self.db.close()

    # -- registry ----------------------------------------------------------------------

    def register_stream(self, spec: StreamSpec, chunk_interval: timedelta | None = None) -> StreamSpec:
        """Create the stream's partitioned table (idempotent for the same schema).
        ``chunk_interval`` fixes the stream's chunk interval now (else its batches choose
        it, see :meth:`settle_interval`)."""
        spec = self.catalog.register(spec)
        if chunk_interval is not None:
            chunks.set_interval(self.catalog, spec.name, chunk_interval)
        return spec

    def stream(self, name: str) -> StreamSpec:
        return self.catalog.stream(name)

    def drop_stream(self, name: str) -> bool:
        """Drop stream ``name`` whole, with its chunks and catalog rows
        (:func:`archive.drop.drop_stream_sql`); False when it is not archived."""
        if name not in self.catalog.names():
            return False
        with self.catalog.transaction() as conn, conn.cursor() as cur:
            drop_stream_sql(cur, name)
        self.catalog.forget(name)
        for key in [k for k in self.present.keys() if k[0] == name]:
            self.present.invalidate(*key)
        return True

    def streams(self) -> list[StreamSpec]:
        return self.catalog.streams()

    def cluster_by(self, stream: str, keys: tuple[str, ...]) -> tuple[str, ...]:
        """Ask for the executors to write the stream's rows sorted by ``keys`` within each
        chunk of a micro-batch partition (:mod:`archive.contributors`); the first keys
        asked for in this process win. Returns the stream's cluster keys."""
        return self.catalog.cluster_by(stream, keys)

    def cluster_keys(self, stream: str) -> tuple[str, ...]:
        """The columns the stream's rows are written sorted by, or ()."""
        return self.catalog.cluster_keys(stream)

    def horizon(self, stream: str) -> datetime | None:
        """The stream's expiry horizon as last moved by :meth:`demote`, or None."""
        return self.catalog.horizon(stream)

    # -- the write path (archive.writes) -----------------------------------------------

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
        return self.writes.append(self.stream(stream), batch_id, data, bulk, key)

    def commit_parts(self, stream: str, batch_id: int) -> AppendResult:
        """Commit a micro-batch whose partitions the executors have archived
        (:mod:`archive.exec_sink`): in one transaction, log the batch, add its
        per-partition counts to the chunk catalog and forget the partition records.
        The present mirror drops the touched chunks; their next read goes to SQL."""
        return self.writes.commit_parts(self.stream(stream), batch_id)

    def batch_done(self, stream: str, batch_id: int) -> bool:
        """Whether ``(stream, batch_id)`` is in the batch log (a replay is then a no-op)."""
        return reads.batch_done(self.catalog, stream, batch_id)

    # -- chunk layout (archive.chunks) -------------------------------------------------

    def grid_of(self, stream: str) -> ChunkGrid:
        """The stream's own chunk grid: its recorded interval, else its configured one,
        else ``chunk_span`` (until its first batch fixes it)."""
        return self.catalog.grid_of(stream)

    def grid_for(self, streams: Iterable[str]) -> ChunkGrid:
        """The task grid of a history-query over ``streams`` (their coarsest interval)."""
        return chunks.task_grid(self.catalog, streams)

    def fix_interval(self, stream: str, rows: int, span: timedelta) -> ChunkGrid:
        """The stream's grid after :meth:`settle_interval` with ``rows`` spread over
        ``span`` (e.g. a whole file about to be replayed)."""
        return chunks.fix_interval(self.catalog, stream, rows, span)

    def settle_interval(self, stream: str, batch: chunks.Evidence | None = None) -> ChunkGrid:
        """The grid the stream's next rows go on: its interval chosen, revised (the
        stream's few chunks moved onto another step) or fixed first, from ``batch``
        (the next batch's rows, instants and span, if known) and the rows archived so
        far (:func:`archive.chunks.settle`)."""
        return chunks.settle(self.catalog, stream, batch, self.present)

    def has_interval(self, stream: str) -> bool:
        """Whether ``stream`` has a chunk interval recorded (final or provisional)."""
        return self.catalog.interval(stream) is not None

    def interval_from_rate(self, stream: str) -> bool:
        """Whether ``stream``'s interval waits for the next rows' rate: none recorded
        yet, or only a guess (see :func:`archive.chunks.rate_based`)."""
        return chunks.rate_based(self.catalog, stream)

    def ensure_chunks(self, stream: str, chunk_ids: Iterable[int], bulk: bool = False) -> dict[int, Tier]:
        """Create the missing chunks of ``stream`` among ``chunk_ids`` (its own grid), in
        transactions of at most ``archive.chunks.CHUNKS_PER_TRANSACTION``; their tiers.
        Never revises the interval (the ids are on the grid as it is)."""
        if not self.has_interval(stream):
            chunks.settle(self.catalog, stream)
        return chunks.ensure_chunks(self.catalog, self.stream(stream), chunk_ids, bulk)

    def ensure_span(self, stream: str, min_ts: datetime, max_ts: datetime, bulk: bool = False,
                    rows: int | None = None) -> dict[int, Tier]:
        """Ensure the chunks covering ``[min_ts, max_ts]`` of ``stream`` exist, with bounded
        locks per transaction (see :func:`archive.chunks.ensure_span`)."""
        return chunks.ensure_span(self.catalog, stream, min_ts, max_ts, bulk, rows)

    # -- reads -------------------------------------------------------------------------

    def chunks(self, stream: str | None = None, tier: Tier | None = None,
               include_dropped: bool = False) -> list[ChunkInfo]:
        return self.catalog.chunks(stream, tier, include_dropped)

    def chunk_ids(self, streams: Iterable[str]) -> list[int]:
        """Task ids (on :meth:`grid_for` of ``streams``) holding data of any of them, newest first."""
        names = list(streams)
        for s in names:
            self.stream(s)
        return self._task_ids.get(self.catalog, names)

    def present_frame(self, stream: str, chunk_id: int) -> pd.DataFrame:
        """The rows of one chunk (``_sid``, event time, payload). A present chunk is held in
        memory once read (and kept up to date by appends); any other chunk is read from
        PostgreSQL each time."""
        return reads.chunk_frame(self.catalog, self.present, stream, chunk_id)

    def read(self, stream: str, start: datetime, end: datetime, with_ids: bool = False) -> pd.DataFrame:
        """Rows of ``stream`` with ``start <= ts <= end`` (both inclusive), ordered by time.
        A plain read for the engine (contexts, replicas), not a user history-query."""
        return reads.time_range(self.catalog, stream, start, end, with_ids)

    def dead_letter(self, stream: str, row: Mapping[str, Any], reason: str) -> None:
        """Record one row refused after archiving (e.g. a context a query cannot use)."""
        reads.add_dead_letter(self.catalog, stream, row, reason)

    def dead_letters(self, stream: str | None = None, limit: int = 100) -> list[dict]:
        return reads.dead_letters(self.catalog, stream, limit)

    def batch_ids(self, stream: str) -> list[int]:
        return reads.batch_ids(self.catalog, stream)

    def index_store(self, operator: str) -> simindex.IndexStore:
        return simindex.IndexStore(self.db, operator)

    # -- tiers, retention, history -----------------------------------------------------

    def demote(self, horizon: datetime, streams: Iterable[str] | None = None) -> list[tiers.Transition]:
        """Move every present chunk whose end is <= ``horizon`` to the recent tier, then
        tell the similarity index builders which chunks were sealed
        (:func:`archive.simindex.ready`)."""
        moves = tiers.demote(self.catalog, self.present, horizon, streams)
        sealed: dict[str, list[int]] = {}
        for m in moves:
            if m.action == "demote":
                sealed.setdefault(m.stream, []).append(m.chunk_id)
        for stream, ids in sealed.items():
            simindex.ready(self, stream, ids)  # their similarity indexes can be built now, in the background
        return moves

    def age(self) -> list[tiers.Transition]:
        """Keep the newest R non-present chunks of each stream recent, the rest old."""
        return tiers.age(self.catalog)

    def apply_retention(self, contributing: tiers.Contributing | None = None) -> list[tiers.Transition]:
        return tiers.apply_retention(self.catalog, contributing)

    def status(self) -> dict[str, Any]:
        out = tiers.status(self.catalog, self.present)
        out["database"] = self.db.outages()  # reachability: the outage under way and the recorded ones
        return out

    def prepare(self, sql: str) -> HistoryQuery:
        return history.prepare(sql, self.catalog.names(), self.references.names())

    def run_history_query(self, query: HistoryQuery, params: Mapping[str, Any], chunk_id: int,
                          conn: Any = None, timeout_ms: int | None = None,
                          flags: RowFlags | None = None) -> pd.DataFrame:
        """:meth:`ChunkStore.run_history_query`, every stream read through its flags:
        ``flags`` if given (a re-evaluation under other flags), else :attr:`row_flags`.
        The BRIN summaries of the present chunks it reads are brought up to date first
        (:meth:`summarize_for`)."""
        self.summarize_for(query.streams, chunk_id)
        return history.run(self.catalog, query, params, chunk_id, conn, timeout_ms,
                           self.reference_refs(query.references), self.row_flags if flags is None else flags)

    def summarize_for(self, streams: Iterable[str], chunk_id: int) -> int:
        """Bring up to date the BRIN summaries of the chunks of task interval ``chunk_id``
        of each of ``streams`` that has a summarizer (:attr:`summarizers`), unless the
        interval ends at or before the stream's horizon (no present chunk there); returns
        the page ranges summarized.

        A present chunk's pages written since the last summary are unsummarized, and a
        BRIN scan reads every one of them (:mod:`archive.contributors`): without this, a
        history-query over one chunk (M 4.3) pinned to a key of a clustered stream
        (``h.sid = :sid``, archive.history_plan) reads, besides its key's ranges, every
        page written since the summarizer's last pass, rows still being written among
        them. Summaries only let a scan skip ranges: the rows read are the same. A
        summarizer that fails is logged and the query runs without it (correct, slower)."""
        streams = tuple(streams)
        todo = [s for s in streams if s in self.summarizers]
        if not todo:
            return 0
        lo, hi = chunks.task_grid(self.catalog, streams).bounds(chunk_id)
        done = 0
        for s in todo:
            horizon = self.catalog.horizon(s)
            if horizon is not None and hi <= horizon:
                continue
            try:
                done += self.summarizers[s](lo, hi - timedelta(microseconds=1))  # its span's last instant
            except Exception as exc:  # noqa: BLE001 - only the read's speed depends on it
                log.warning("archive: summarizing the BRIN index of %r before a history-query failed (the query "
                            "reads its unsummarized pages): %s", s, " ".join(f"{exc}".split()))
        return done

    def reference_refs(self, names: Iterable[str]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """``(name, physical table, columns)`` of reference tables, as :func:`archive.history.render` takes them."""
        return tuple((n, m.table, m.column_names()) for n in names for m in (self.references.meta(n),))

    def copy_reads(self, reads: Sequence[Read], chunk_id: int, grid_streams: Iterable[str], conn: Any = None,
                   timeout_ms: int | None = None) -> list[pa.Table]:
        return chunk_copy.copy_reads(self.catalog, reads, chunk_id, grid_streams, conn, timeout_ms)
