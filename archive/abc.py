"""The chunk-store contract (M 4.1), apart from its PostgreSQL implementation.

Everything above ``archive`` (the Recall Manager, Similarity Recall, the engine) talks to
a :class:`ChunkStore`. Each stream's chunks form its own grid,
``chunk_id = floor(epoch_seconds(ts) / interval)``; a history-query joining several
streams runs per interval of the coarsest of their grids (:meth:`ChunkStore.grid_for`;
the paper has one global grid, see :mod:`archive.chunks`), so it may join several
streams inside one task (M 4.3).

Event times are timezone-aware UTC datetimes in Python and ``timestamptz`` in
PostgreSQL. The errors named here live in :mod:`archive.errors`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from archive.errors import (  # noqa: F401 - re-exported: the contract's errors
    ArchiveError,
    ChunkNotFound,
    HistoryQueryCancelled,
    HistoryQueryTimeout,
    MissingParameter,
    UnknownStream,
    UnsafeQuery,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from archive.simindex import IndexStore
    from archive.streams import StreamSpec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T = TypeVar("T")


class Tier(StrEnum):
    """Where a chunk lives (M 4.1)."""

    PRESENT = "present"  # newest, still holds alive tuples; durable and in memory
    RECENT = "recent"  # the next R chunks: indexed, materialized
    OLD = "old"  # the rest: raw, indexes dropped


@dataclass(frozen=True)
class ChunkGrid:
    """A chunk grid: chunk ``c`` is ``[epoch + c * span, epoch + (c + 1) * span)``.

    >>> g = ChunkGrid(timedelta(hours=1))
    >>> g.chunk_of(datetime(1970, 1, 1, 2, 30, tzinfo=UTC))
    2
    >>> g.bounds(-1)[0].isoformat()
    '1969-12-31T23:00:00+00:00'
    """

    span: timedelta

    def __post_init__(self) -> None:
        if self.span.total_seconds() <= 0:
            raise ValueError(f"chunk span must be positive, got {self.span!r}")

    @property
    def span_us(self) -> int:
        return self.span // timedelta(microseconds=1)

    def chunk_of(self, ts: datetime) -> int:
        if ts.tzinfo is None:
            raise ValueError(f"event time must be timezone-aware, got naive {ts!r}")
        return math.floor(((ts - EPOCH) // timedelta(microseconds=1)) / self.span_us)

    def bounds(self, chunk_id: int) -> tuple[datetime, datetime]:
        """Half-open ``[start, end)`` of a chunk."""
        start = EPOCH + timedelta(microseconds=chunk_id * self.span_us)
        return start, start + self.span


class DescendingIds(list):
    """Chunk ids known to be distinct and newest first (so a planner may bisect them)."""


@dataclass(frozen=True)
class ChunkInfo:
    """One row of the chunk catalog: chunk ``chunk_id`` of ``stream`` holds the rows with
    ``start <= ts < end`` (on the stream's own grid). ``rows`` is how many it holds now,
    ``late_rows`` how many of them arrived after it left the present tier; ``indexes``
    the indexes its tier gave it, ``materialized`` the tags of replicas computed from it;
    ``size_bytes`` is None when the store does not measure it."""

    stream: str
    chunk_id: int
    start: datetime
    end: datetime
    tier: Tier
    rows: int
    late_rows: int
    size_bytes: int | None
    indexes: tuple[str, ...]
    materialized: tuple[str, ...]


@dataclass(frozen=True)
class HistoryQuery:
    """A validated history-query template (one SELECT), ready to run chunk by chunk.

    ``streams`` are the archived streams it reads; ``params`` the placeholder names it
    binds (``:name`` in the template); ``references`` the reference tables it reads
    (:mod:`archive.reference`), each as of the event's time.
    """

    template: str
    streams: tuple[str, ...]
    params: tuple[str, ...]
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class Read:
    """One stream's part of a bulk chunk read (:meth:`ChunkStore.copy_reads`): ``exprs``
    are ``(name, SQL expression)`` pairs over the stream as ``e``, built by the caller
    from validated identifiers (e.g. ``e."user"::text``), never user text; ``with_ts``
    adds ``_ts_us``; ``coded`` dictionary-encodes the text columns while parsing (see
    :func:`archive.chunk_copy.codes`)."""

    stream: str
    exprs: Sequence[tuple[str, str]]
    with_ts: bool = True
    coded: bool = False


@dataclass(frozen=True)
class AppendResult:
    """What one micro-batch append did. ``duplicate`` means the batch id was already
    archived, so nothing was written (exactly-once)."""

    stream: str
    batch_id: int
    rows: int
    late_rows: int
    dead_letters: int
    duplicate: bool
    chunks: tuple[int, ...]
    max_ts: datetime | None = None  # newest event time in the batch's archived rows


class ChunkStore(ABC):
    """What recall and the engine need of an archive of streams cut into chunks.

    The contract every implementation keeps (a contract suite runs it against each
    PostgreSQL backend):

    - Stream names are registered before use; a method given an unregistered name
      raises :class:`~archive.errors.UnknownStream` (a ``LookupError``) naming it, except
      :meth:`grid_of` and :meth:`grid_for`, which give a stream whose interval is not
      fixed yet (unregistered included) the default :attr:`grid`.
    - Chunk ids are on a grid: ``chunk_id = floor((ts - epoch) / interval)``, the chunk
      holding ``[chunk_id * interval, (chunk_id + 1) * interval)``. Each stream has its own
      grid (:meth:`grid_of`); a query over several streams runs on :meth:`grid_for`.
    - Lists of chunks or ids are newest first; ids within one list are distinct.
    - Reads never write; a history-query runs read-only under a statement timeout.
    - Several stores may open one archive (processes, restarts): what one writes, the
      others' :meth:`chunks` and :meth:`chunk_ids` see once it is committed.
    - Thread-safe: any method may be called from several threads at once.
    """

    grid: ChunkGrid
    """The default grid: that of a stream whose interval is not fixed yet."""

    # -- streams -----------------------------------------------------------------------

    @abstractmethod
    def stream(self, name: str) -> StreamSpec:
        """The registered stream ``name`` (its event-time column, columns in schema
        order, kind, indexes, retention). Raises :class:`~archive.errors.UnknownStream`."""

    @abstractmethod
    def streams(self) -> list[StreamSpec]:
        """Every registered stream, in no particular order."""

    # -- chunks ------------------------------------------------------------------------

    @abstractmethod
    def chunks(self, stream: str | None = None, tier: Tier | None = None) -> list[ChunkInfo]:
        """Catalog rows of the chunks that exist (not dropped), of ``stream`` (else of
        every stream) and in ``tier`` (else in any): newest chunk first, then by stream
        name (chunk ids on different grids are not comparable in time: compare
        ``interval`` to order streams of different grids). Raises
        :class:`~archive.errors.UnknownStream` for an unregistered ``stream``."""

    def grid_of(self, stream: str) -> ChunkGrid:
        """The stream's own chunk grid (its ``ChunkInfo.chunk_id`` are on it). A store with
        one grid for every stream returns :attr:`grid`."""
        return self.grid

    def grid_for(self, streams: Iterable[str]) -> ChunkGrid:
        """The grid a history-query over ``streams`` runs on (its tasks' intervals): the
        coarsest of their grids, so each row of every stream falls in exactly one task.
        A store with one grid for every stream returns :attr:`grid`."""
        return self.grid

    @abstractmethod
    def chunk_ids(self, streams: Iterable[str]) -> list[int]:
        """Ids, on :meth:`grid_for` ``streams``, of the task intervals overlapping any
        existing chunk of any of ``streams``: distinct, newest first (a list a planner
        may bisect). Raises :class:`~archive.errors.UnknownStream`."""

    # -- history-queries ---------------------------------------------------------------

    @abstractmethod
    def prepare(self, sql: str) -> HistoryQuery:
        """Validate a template: one read-only SELECT over registered streams, ``:name``
        placeholders for event attributes. Raises :class:`~archive.errors.UnsafeQuery`
        naming the problem; never runs it."""

    @abstractmethod
    def run_history_query(
        self,
        query: HistoryQuery,
        params: Mapping[str, Any],
        chunk_id: int,
        conn: Any = None,
        timeout_ms: int | None = None,
        flags: Any = None,
    ) -> pd.DataFrame:
        """Run ``query`` over one task interval ``chunk_id`` (on :meth:`grid_for` its
        streams): every stream it names is read restricted to that interval, so the
        template never states the time predicate. Read-only, with every placeholder bound
        from ``params`` (a missing one raises :class:`~archive.errors.MissingParameter`),
        under ``timeout_ms`` (else the store's statement timeout;
        :class:`~archive.errors.HistoryQueryTimeout` past it). A cancelled ``conn`` raises
        :class:`~archive.errors.HistoryQueryCancelled`; any other refusal by the database
        :class:`~archive.errors.HistoryQueryFailed` with its message. An interval with no
        rows gives an empty frame with the query's columns; the rows of one interval are
        never those of another, so the intervals of :meth:`chunk_ids` together read each
        row once.

        ``conn`` is a connection from :meth:`connect` (so another thread can
        ``conn.cancel()`` it); without one the store uses a short-lived connection.
        A stream with rows flagged bad is read through its flags
        (:class:`archive.row_flags.RowFlags`): ``flags`` if given, else the store's own.
        """

    @abstractmethod
    def copy_reads(self, reads: Sequence[Read], chunk_id: int, grid_streams: Iterable[str], conn: Any = None,
                   timeout_ms: int | None = None) -> list[pa.Table]:
        """Bulk reads of one task interval ``chunk_id`` (on :meth:`grid_for`
        ``grid_streams``), in one read-only snapshot: one Arrow table per
        :class:`Read`, as :func:`archive.chunk_copy.copy_reads`
        describes. ``conn`` and ``timeout_ms`` as for :meth:`run_history_query`."""

    @abstractmethod
    def connect(self) -> Any:
        """A new connection for running history-queries (the caller closes it)."""

    def retry(self, fn: Callable[[], T], what: str, on_lost: Callable[[], Any] | None = None) -> T:
        """Run ``fn`` (one whole, repeatable unit of work, e.g. a history-query over one
        chunk), again while the store is unreachable, calling ``on_lost`` before each
        retry; other errors propagate at once. ``what`` names the work in errors. A store
        that cannot lose its connection runs ``fn`` once."""
        return fn()

    def index_store(self, operator: str) -> IndexStore | None:
        """Where Similarity Recall ``operator`` persists its chunk indexes and vocabulary
        (:class:`archive.simindex.IndexStore`), or None when this store keeps none (the
        indexes are then built on every start)."""
        return None
