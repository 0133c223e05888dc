"""The contract between the Recall Manager and the recall operators (M 4.3-4.6, fig. 9).

A *task description* belongs to a deployed Recall or Similarity Recall operator; a
*task* is made per event. The manager asks the scheduler which task runs next, runs
that task's history-query over its next chunk (newest first) and hands the rows back to
the task's operator, which answers with outputs: new tuples and revisions (M 4.6).

Operators implement :class:`recall.abc.RecallOperator`; the manager never looks inside
their state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from archive.abc import HistoryQuery

__all__ = ["EndReason", "Interval", "Output", "OutputKind", "TaskSpec"]


class OutputKind(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    BOUNDARY = "boundary"  # no more revisions for this event (M 4.6, fig. 11)


class EndReason(StrEnum):
    DONE = "done"  # all chunks, or the time bound, reached
    CANCELLED = "cancelled"
    DISCARDED = "discarded"  # feedback deadline passed
    FAILED = "failed"
    EXHAUSTED = "exhausted"  # materialized history ran out before the archive's start


@dataclass(frozen=True)
class Interval:
    """Half-open interval of event time ``[start, end)``."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Output:
    """One tuple on a recall operator's output stream.

    ``key`` identifies the output row across revisions (a group key for Recall, the
    past event's id for Similarity Recall). ``seq`` increases per (operator, eid).
    ``covered`` is the interval of history the value is computed from (M 4.5.1).
    """

    operator: str
    eid: str
    event_ts: datetime
    kind: OutputKind
    seq: int
    key: str
    row: Mapping[str, Any]
    covered: Interval | None


@dataclass(frozen=True)
class TaskSpec:
    """What an operator asks the manager to run for one event (M fig. 9).

    ``bound`` is the oldest event time the task needs (None: unbounded, so it suspends
    every ``feedback_period`` chunks for user feedback, M 4.4).
    """

    operator: str
    eid: str
    event_ts: datetime
    query: HistoryQuery
    params: Mapping[str, Any]
    bound: datetime | None = None
    tickets: int = 100
    materialization: bool = False
    feedback_period: int | None = None
    feedback_timeout: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
