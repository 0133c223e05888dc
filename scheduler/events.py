"""Events of the scheduler, as small frozen values (STYLE.md, "Value objects").

Every state change the scheduler makes is reported as one of these, to the listener
given to :class:`scheduler.StrideScheduler` and, where the brief of a method says so, as
its return value. The Recall Manager logs them and publishes them to the API.

>>> e = TaskCancelled(task_id="t1", eid="e7", was_running=True, at=3.0)
>>> e.kind
'task_cancelled'
>>> event_dict(e)["was_running"]
True
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

from scheduler.model import Priority


class _Event:
    """Mixin: ``kind`` is the snake_case class name, for logs and the live update stream."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()


@dataclass(frozen=True)
class TaskSubmitted(_Event):
    """A task joined its priority level's queue at ``pass_`` (global pass + one stride)."""

    task_id: str
    eid: str
    priority: Priority
    tickets: int
    pass_: Fraction
    at: float


@dataclass(frozen=True)
class QuantumGranted(_Event):
    """``choose`` gave the task its ``quantum``-th quantum (1-based): run one
    history-query over its next chunk, then call ``complete``."""

    task_id: str
    eid: str
    priority: Priority
    quantum: int
    tickets: int
    pass_: Fraction
    at: float


@dataclass(frozen=True)
class QuantumCompleted(_Event):
    """A quantum ended having produced ``results`` rows."""

    task_id: str
    eid: str
    quantum: int
    results: int
    at: float


@dataclass(frozen=True)
class TicketsChanged(_Event):
    """Tickets moved from ``old`` to ``new``; ``reason`` is ``"results"`` (deduction
    proportional to results, M 4.4) or ``"accelerate"``."""

    task_id: str
    eid: str
    old: int
    new: int
    reason: str
    at: float


@dataclass(frozen=True)
class TaskSuspended(_Event):
    """An unbounded task ran its feedback period and waits for feedback until
    ``deadline`` (clock seconds), M 4.4."""

    task_id: str
    eid: str
    quanta: int
    deadline: float
    at: float


@dataclass(frozen=True)
class TaskResumed(_Event):
    """Feedback (an explicit continue, or an accelerate) brought a suspended task back."""

    task_id: str
    eid: str
    pass_: Fraction
    at: float


@dataclass(frozen=True)
class TaskFinished(_Event):
    """The task reported ``done``: it has processed all the history it needs."""

    task_id: str
    eid: str
    quanta: int
    results: int
    at: float


@dataclass(frozen=True)
class TaskDiscarded(_Event):
    """No feedback reached the event before ``deadline``: all its tasks were dropped.
    ``was_running`` means a history-query is still in flight and should be cancelled."""

    task_id: str
    eid: str
    deadline: float
    was_running: bool
    at: float


@dataclass(frozen=True)
class TaskCancelled(_Event):
    """``cancel(eid)`` removed the task. ``was_running``: its query is still in flight."""

    task_id: str
    eid: str
    was_running: bool
    at: float


SchedulerEvent = (
    TaskSubmitted
    | QuantumGranted
    | QuantumCompleted
    | TicketsChanged
    | TaskSuspended
    | TaskResumed
    | TaskFinished
    | TaskDiscarded
    | TaskCancelled
)


def event_dict(event: SchedulerEvent) -> dict[str, Any]:
    """A JSON-friendly dict of an event, with its ``kind``; fractions become floats."""
    out: dict[str, Any] = {"kind": event.kind}
    for f in dataclasses.fields(event):
        v = getattr(event, f.name)
        if isinstance(v, Fraction):
            v = float(v)
        elif isinstance(v, Enum):
            v = v.name.lower()
        out[f.name.rstrip("_")] = v
    return out
