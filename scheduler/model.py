"""Value types of the scheduler: priority levels, task states and the task snapshot.

Moirae has two priority levels for recall tasks (M 4.4): ordinary query processing
above materialization. Stride scheduling applies among tasks of the same level.

>>> Priority.QUERY < Priority.MATERIALIZATION
True
>>> TaskState.SUSPENDED.value
'suspended'
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from fractions import Fraction
from typing import Any


class Priority(IntEnum):
    """Lower value runs first. QUERY tasks always precede MATERIALIZATION tasks, except
    that a materialization task may use a spare slot while the system is lightly loaded
    (M 4.4: "It schedules lower priority tasks only when the system is lightly-loaded")."""

    QUERY = 0
    MATERIALIZATION = 1


class TaskState(StrEnum):
    """Life cycle of a recall task.

    ``runnable`` -> ``running`` (a quantum, i.e. one history-query over one chunk, is in
    flight) -> back to ``runnable``, or ``suspended`` (waiting for user feedback, M 4.4),
    or ``finished``. Cancelled and discarded tasks leave the scheduler at once.
    """

    RUNNABLE = "runnable"
    RUNNING = "running"
    SUSPENDED = "suspended"
    FINISHED = "finished"


@dataclass(frozen=True)
class TaskInfo:
    """A snapshot of one task, for the API (``GET /api/scheduler/tasks``) and tests.

    ``pass_`` is the task's virtual time (Waldspurger's *pass*); for a suspended task it
    is the pass it would rejoin with now (global pass + remain). ``deadline`` is set only
    while suspended: the clock time at which the event's tasks are discarded.
    """

    task_id: str
    eid: str
    priority: Priority
    state: TaskState
    tickets: int
    stride: Fraction
    pass_: Fraction
    quanta: int
    results: int
    submitted_at: float
    deadline: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: fractions as floats, enums by name/value."""
        return {
            "task_id": self.task_id,
            "eid": self.eid,
            "priority": self.priority.name.lower(),
            "state": self.state.value,
            "tickets": self.tickets,
            "stride": float(self.stride),
            "pass": float(self.pass_),
            "quanta": self.quanta,
            "results": self.results,
            "submitted_at": self.submitted_at,
            "deadline": self.deadline,
        }
