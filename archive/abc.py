"""The chunk-store contract (M 4.1), apart from its PostgreSQL implementation.

Everything above ``archive`` (the Recall Manager, Similarity Recall, the engine) talks to
a :class:`ChunkStore`. Each stream's chunks form its own grid,
``chunk_id = floor(epoch_seconds(ts) / interval)``; a history-query joining several
streams runs per interval of the coarsest of their grids (:meth:`ChunkStore.grid_for`;
DESIGN.md §3 had one global grid, see :mod:`archive.chunks`), so it may join several
streams inside one task (M 4.3).

Event times are timezone-aware UTC datetimes in Python and ``timestamptz`` in
PostgreSQL.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pandas as pd

from moirae.base.errors import MoiraeError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ArchiveError(MoiraeError):
    """Root of the Archiver's errors."""


class UnknownStream(ArchiveError, LookupError):
    """A stream name that was never registered."""


class ChunkNotFound(ArchiveError, LookupError):
    """A chunk id that holds no data for the stream(s) asked about."""


class UnsafeQuery(ArchiveError, ValueError):
    """A history-query template that is not one read-only SELECT over known streams."""


class MissingParameter(ArchiveError, KeyError):
    """A template placeholder with no bound value."""


class HistoryQueryTimeout(ArchiveError, TimeoutError):
    """A history-query ran past its statement timeout."""


class HistoryQueryCancelled(ArchiveError):
    """A history-query was cancelled (its event was cancelled)."""


class Tier(StrEnum):
    """Where a chunk lives (M 4.1)."""

    PRESENT = "present"  # newest, still holds alive tuples; durable and in memory
    RECENT = "recent"  # the next R chunks: indexed, materialized
    OLD = "old"  # the rest: raw, indexes dropped


@dataclass(frozen=True)
class ChunkGrid:
    """The global chunk grid.

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
    """One row of the chunk catalog."""

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
    binds (``:name`` in the template).
    """

    template: str
    streams: tuple[str, ...]
    params: tuple[str, ...]


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
    """What recall and the engine need of an archive."""

    grid: ChunkGrid

    @abstractmethod
    def chunks(self, stream: str | None = None, tier: Tier | None = None) -> list[ChunkInfo]:
        """Catalog rows, newest chunk first."""

    def grid_for(self, streams: Iterable[str]) -> ChunkGrid:
        """The grid a history-query over ``streams`` runs on (its tasks' intervals); a
        store with one grid for every stream returns it."""
        return self.grid

    @abstractmethod
    def chunk_ids(self, streams: Iterable[str]) -> list[int]:
        """Ids, on :meth:`grid_for` ``streams``, of the task intervals holding data of any
        of ``streams``, newest first."""

    @abstractmethod
    def prepare(self, sql: str) -> HistoryQuery:
        """Validate a template: one SELECT over registered streams (raises UnsafeQuery)."""

    @abstractmethod
    def run_history_query(
        self,
        query: HistoryQuery,
        params: Mapping[str, Any],
        chunk_id: int,
        conn: Any = None,
        timeout_ms: int | None = None,
    ) -> pd.DataFrame:
        """Run ``query`` over one chunk, read-only, with parameters bound and a timeout.

        The Archiver applies the chunk's interval, not the template. ``conn`` is a
        connection from :meth:`connect` (so another thread can ``conn.cancel()`` it);
        without one a short-lived connection is used.
        """

    @abstractmethod
    def connect(self) -> Any:
        """A new connection for running history-queries (the caller closes it)."""
