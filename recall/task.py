"""Recall tasks and task descriptions (M 4.4, fig. 9).

The Recall Manager keeps one :class:`TaskDescription` per deployed recall operator
(made when the operator is registered) and one :class:`RecallTask` per (event,
operator). A task holds what fig. 9 lists: the SQL template (a validated
:class:`~archive.abc.HistoryQuery`) and the parameters bound from the event, the chunk
list and the identifier of the chunk to process next, and runtime statistics.

The chunk list is a snapshot taken when the task starts: the chunks holding data of the
template's streams whose start is at or before the event's time, newest first (M 4.3:
"historical data should be retrieved in reverse chronological order"), cut at the
task's time bound: a chunk whose end is at or before the bound holds nothing the task
needs, so the task is done when it reaches one.

>>> from datetime import UTC, datetime, timedelta
>>> from archive.abc import ChunkGrid
>>> g = ChunkGrid(timedelta(hours=1))
>>> ts = datetime(1970, 1, 1, 5, 30, tzinfo=UTC)
>>> plan_chunks([7, 5, 4, 3, 1], g, ts, bound=datetime(1970, 1, 1, 3, tzinfo=UTC))
[5, 4, 3]
>>> plan_chunks([1, 5, 3], g, ts, bound=None)
[5, 3, 1]

:class:`RecallTask` is the manager's mutable bookkeeping and is only touched under the
manager's lock or by the one worker running the task; :class:`TaskView` is the frozen
snapshot that leaves the manager (API, console, tests).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from archive.abc import ChunkGrid, DescendingIds, HistoryQuery
from recall.abc import RecallOperator
from recall.api import EndReason, Interval, TaskSpec


class TaskStatus(StrEnum):
    """Where a task is in its life. The first three mirror the scheduler's states;
    ``ending`` means the operator's ``on_end`` is being called; the rest are the end
    reasons (:class:`~recall.api.EndReason`)."""

    RUNNABLE = "runnable"
    RUNNING = "running"
    SUSPENDED = "suspended"
    ENDING = "ending"
    DONE = "done"
    CANCELLED = "cancelled"
    DISCARDED = "discarded"
    FAILED = "failed"
    EXHAUSTED = "exhausted"

    @classmethod
    def ended(cls, reason: EndReason) -> TaskStatus:
        return cls(reason.value)


def plan_chunks(chunk_ids: Iterable[int], grid: ChunkGrid, event_ts: datetime,
                bound: datetime | None) -> list[int]:
    """The chunks a task will visit, newest first: start <= ``event_ts`` and, with a
    bound, end > ``bound``. Ids already distinct and newest first (what
    :class:`~archive.abc.DescendingIds`, what the Archiver returns) are sliced by bisection, so planning over tens of
    thousands of chunks costs no more than over a few hundred."""
    newest = grid.chunk_of(event_ts)
    oldest = None if bound is None else grid.chunk_of(bound)  # chunk containing the bound: end > bound
    ids = chunk_ids if isinstance(chunk_ids, DescendingIds) else sorted(set(chunk_ids), reverse=True)
    neg = [-c for c in ids] if len(ids) < 64 else _Negated(ids)
    lo = bisect.bisect_left(neg, -newest)
    hi = len(ids) if oldest is None else bisect.bisect_right(neg, -oldest)
    return ids[lo:hi]


class _Negated:
    """A descending list seen as ascending (for :mod:`bisect`) without copying it."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> int:
        return -self.ids[i]


@dataclass
class TaskDescription:
    """Per deployed recall operator (M fig. 9): its name, the operator object the
    manager delivers history to, the SQL template it last submitted, and counters."""

    operator: str
    recall_operator: RecallOperator
    registered_at: float
    template: HistoryQuery | None = None
    submitted: int = 0
    ended: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "template": self.template.template if self.template else None,
            "streams": list(self.template.streams) if self.template else [],
            "submitted": self.submitted,
            "ended": self.ended,
        }


class RecallTask:
    """One recall task (M fig. 9). Mutable; owned by the Recall Manager."""

    __slots__ = (
        "task_id", "spec", "description", "state", "chunks", "next_index", "status", "submitted_at",
        "first_chunk_at", "first_result_at", "time_spent", "rows", "outputs", "error", "end_reason",
        "ended_at", "covered_start", "covered_end", "worker", "stop", "max_seq", "history_before",
        "history_remaining", "reprocessed", "replica_steps", "materialized_until", "__weakref__",
    )

    def __init__(self, task_id: str, spec: TaskSpec, description: TaskDescription, chunks: list[int],
                 submitted_at: float) -> None:
        self.task_id = task_id
        self.spec = spec
        self.description = description
        self.state: Any = None  # the operator's per-task state (RecallOperator.start)
        self.chunks = chunks
        self.next_index = 0
        self.status = TaskStatus.RUNNABLE
        self.submitted_at = submitted_at
        self.first_chunk_at: float | None = None
        self.first_result_at: float | None = None
        self.time_spent = 0.0
        self.rows = 0
        self.outputs = 0
        self.error: str | None = None
        self.end_reason: EndReason | None = None
        self.ended_at: float | None = None
        self.covered_start: datetime | None = None
        self.covered_end: datetime | None = None
        self.worker: Any = None  # the worker running its quantum, if any
        self.stop: EndReason | None = None  # set when cancelled / discarded from outside
        self.max_seq = -1
        # replica2 (recall.replica2): where the raw-history search goes on from, how many raw
        # units remain older than that (None: replica2 does not apply), units re-processed
        self.history_before: datetime | None = None
        self.history_remaining: int | None = None
        self.reprocessed = 0
        self.replica_steps = 0
        self.materialized_until: datetime | None = None

    @property
    def searched_back_to(self) -> datetime | None:
        """The oldest event time searched: the covered interval's start, or where the
        raw-history search has reached when that is older (a unit without events)."""
        marks = [t for t in (self.covered_start, self.history_before if self.replica_steps else None) if t]
        return min(marks) if marks else None

    @property
    def more_history(self) -> bool:
        """Whether replica2 has raw history left for the task once its chunks are read."""
        return bool(self.history_remaining)

    @property
    def next_chunk(self) -> int | None:
        """Fig. 9's "next chunk id": the chunk the next history-query runs over."""
        return self.chunks[self.next_index] if self.next_index < len(self.chunks) else None

    @property
    def remaining(self) -> int:
        """Chunks left: planned ones not read yet, plus raw units replica2 has yet to search."""
        return len(self.chunks) - self.next_index + (self.history_remaining or 0)

    def covered(self, grid: ChunkGrid, chunk_id: int) -> Interval:
        """Extend the covered interval with ``chunk_id`` (the chunk just processed) and
        return it: from the oldest chunk's start (or the bound, if later) to the newest
        processed chunk's end."""
        start, end = grid.bounds(chunk_id)
        if self.spec.bound is not None and self.spec.bound > start:
            start = self.spec.bound
        self.covered_start = start if self.covered_start is None else min(self.covered_start, start)
        self.covered_end = end if self.covered_end is None else max(self.covered_end, end)
        return Interval(self.covered_start, self.covered_end)

    def view(self, tickets: int | None, status: TaskStatus | None = None) -> TaskView:
        first = None if self.first_result_at is None else self.first_result_at - self.submitted_at
        first_chunk = None if self.first_chunk_at is None else self.first_chunk_at - self.submitted_at
        return TaskView(
            task_id=self.task_id,
            eid=self.spec.eid,
            operator=self.spec.operator,
            event_ts=self.spec.event_ts,
            state=status or self.status,
            tickets=tickets,
            materialization=self.spec.materialization,
            chunks_done=self.next_index,
            chunks_total=len(self.chunks),
            next_chunk=self.next_chunk,
            rows=self.rows,
            outputs=self.outputs,
            submitted_at=self.submitted_at,
            time_to_first_chunk=first_chunk,
            time_to_first_result=first,
            time_spent=self.time_spent,
            covered=None if self.covered_start is None else Interval(self.covered_start, self.covered_end),
            error=self.error,
            ended_at=self.ended_at,
            searched_back_to=self.searched_back_to,
            remaining_chunks=self.remaining,
            materialized_until=self.materialized_until,
            reprocessed_chunks=self.reprocessed,
        )


@dataclass(frozen=True)
class TaskView:
    """A snapshot of one task's statistics (M 4.4: "the Recall Manager keeps other
    runtime statistics about each task"). Times are clock seconds; ``time_to_first_*``
    count from submission; ``time_spent`` sums the task's history-queries and operator
    calls. ``tickets`` is None once the task has left the scheduler."""

    task_id: str
    eid: str
    operator: str
    event_ts: datetime
    state: TaskStatus
    tickets: int | None
    materialization: bool
    chunks_done: int
    chunks_total: int
    next_chunk: int | None
    rows: int
    outputs: int
    submitted_at: float
    time_to_first_chunk: float | None
    time_to_first_result: float | None
    time_spent: float
    covered: Interval | None
    error: str | None
    ended_at: float | None
    searched_back_to: datetime | None = None
    remaining_chunks: int = 0
    materialized_until: datetime | None = None
    reprocessed_chunks: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for ``GET /api/scheduler/tasks``."""
        return {
            "task_id": self.task_id,
            "eid": self.eid,
            "operator": self.operator,
            "event_ts": self.event_ts.isoformat(),
            "state": self.state.value,
            "tickets": self.tickets,
            "materialization": self.materialization,
            "chunks_done": self.chunks_done,
            "chunks_total": self.chunks_total,
            "next_chunk": self.next_chunk,
            "rows": self.rows,
            "outputs": self.outputs,
            "time_to_first_chunk": self.time_to_first_chunk,
            "time_to_first_result": self.time_to_first_result,
            "time_spent": self.time_spent,
            "covered": None if self.covered is None else [self.covered.start.isoformat(),
                                                          self.covered.end.isoformat()],
            "error": self.error,
            "searched_back_to": None if self.searched_back_to is None else self.searched_back_to.isoformat(),
            "remaining_chunks": self.remaining_chunks,
            "materialized_until": None if self.materialized_until is None else self.materialized_until.isoformat(),
            "reprocessed_chunks": self.reprocessed_chunks,
        }


class TaskIds:
    """Thread-safe task id source: ``r1``, ``r2``, ...

    >>> ids = TaskIds(); ids.next(), ids.next()
    ('r1', 'r2')
    """

    def __init__(self, prefix: str = "r") -> None:
        self._prefix = prefix
        self._n = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            self._n += 1
            return f"{self._prefix}{self._n}"
