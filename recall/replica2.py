"""Replica2: a recall task that runs out of materialized history goes on over the raw
archive (M 4.3-4.4, fig. 8 "CQ1-replica2").

A Recall or Similarity Recall over *intermediate* streams (an event-query's events and
contexts) only sees what has been materialized: the newest chunks, re-created when the
query was deployed (replica1, :class:`moirae.materialize.replica.ReplicaOperator`), and
what the live query wrote since. Older raw chunks hold history the task has not seen.

When a task has read its last materialized chunk, the Recall Manager asks the engine's
:class:`HistoryReplica` whether older raw history remains; if so the task is not done:
its next quanta, scheduled by the same stride scheduler under the same tickets and
priority (M 4.4: the task migrates "with its tickets" onto the replica), each re-process
the newest raw units older than what the task has searched, through the same
event- and context-queries (:meth:`HistoryReplica.produce`), and the chunks of the
task's streams those units now hold are appended to the task's chunk list, newest
first, so the operator receives them incrementally, exactly as materialized chunks.
What the re-processing writes is kept (archived, tagged, indexed), so a later task reads
it as materialized; units are claimed, so concurrent tasks never re-process one twice.

The recall layer only declares the contract (:class:`HistoryReplica`) and drives it
(:func:`step`); the engine's implementation lives above it
(:class:`moirae.materialize.replica2.RawHistory`). An operator that wants to know how
far back the search has gone implements :class:`HistoryListener`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from recall.api import Output, TaskSpec

__all__ = ["HistoryListener", "HistoryReplica", "ReplicaStep", "SearchProgress", "start_of_search", "step"]


@dataclass(frozen=True)
class ReplicaStep:
    """What one replica quantum did: the raw history ``[start, end)`` it handled (one or
    more units, newest first), how many of its units it re-processed (0: already
    materialized by an earlier task or replica1), and how many raw units older than
    ``start`` remain."""

    start: datetime
    end: datetime
    reprocessed: int
    remaining: int


@dataclass(frozen=True)
class SearchProgress:
    """How far one task's search has gone (M 4.5.1's interval annotation, extended to
    the raw archive): ``searched_back_to`` is the oldest event time searched (materialized
    or re-processed), ``materialized_until`` the start of the materialized history the
    task began with, ``remaining_chunks`` the raw units not searched yet (0: the whole
    archive has been searched), ``reprocessed`` the units this task re-processed."""

    searched_back_to: datetime | None
    materialized_until: datetime | None
    remaining_chunks: int
    reprocessed: int

    def as_dict(self) -> dict[str, Any]:
        return {"searched_back_to": _iso(self.searched_back_to), "materialized_until": _iso(self.materialized_until),
                "remaining_chunks": self.remaining_chunks, "reprocessed_chunks": self.reprocessed}


@runtime_checkable
class HistoryReplica(Protocol):
    """The engine's raw-history re-processing, as the Recall Manager sees it.

    ``streams`` are a task's history-query streams; ``before`` is the event time below
    which the task has not searched yet; ``bound`` its time bound (None: unbounded).
    """

    def remaining(self, streams: Sequence[str], before: datetime, bound: datetime | None) -> int | None:
        """Raw units older than ``before`` (ending after ``bound``) the task has yet to
        search; None when no deployed event-query produces ``streams`` (replica2 does
        not apply: a raw stream's history is all there)."""

    def produce(self, streams: Sequence[str], before: datetime, bound: datetime | None,
                units: int = 1) -> ReplicaStep | None:
        """Make the newest raw history older than ``before`` materialized (at most
        ``units`` units, re-processing those not yet materialized, each at most once
        across tasks); None when none remains."""


@runtime_checkable
class HistoryListener(Protocol):
    """An operator told how far its task's search has gone after every replica step."""

    def on_history(self, state: Any, progress: SearchProgress) -> list[Output]: ...


def start_of_search(spec: TaskSpec, chunks: Sequence[int], grid) -> datetime:
    """Where replica2 starts for a task whose planned chunks are ``chunks`` (newest
    first) on ``grid``: the start of the oldest, else the event's time."""
    return grid.bounds(chunks[-1])[0] if chunks else spec.event_ts


def step(replica: HistoryReplica, store: Any, spec: TaskSpec, before: datetime, known: Sequence[int],
         units: int) -> tuple[ReplicaStep | None, list[int]]:
    """One replica quantum of a task: re-process (or find materialized) the raw history
    just older than ``before``, then the task-grid chunks of the task's streams that now
    hold data there and that the task has not planned (``known``: its chunk list, newest
    first), newest first."""
    streams = spec.query.streams
    done = replica.produce(streams, before, spec.bound, units)
    if done is None:
        return None, []
    grid = store.grid_for(streams)
    oldest_known = known[-1] if known else None
    lo, hi = grid.chunk_of(done.start), grid.chunk_of(before)
    new = [c for c in store.chunk_ids(streams) if lo <= c <= hi and (oldest_known is None or c < oldest_known)
           and grid.bounds(c)[0] < before and (spec.bound is None or grid.bounds(c)[1] > spec.bound)]
    return done, sorted(set(new), reverse=True)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()
