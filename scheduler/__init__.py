"""Stride scheduling of recall tasks (M 4.4): the pure algorithm, stdlib only.

The Recall Manager uses :class:`StrideScheduler`::

    s = StrideScheduler(SchedulerConfig(...), clock=clock, listener=log)
    tid = s.submit(eid, tickets=100, priority=Priority.QUERY, bounded=False,
                   feedback_period=5, feedback_timeout=60.0)
    grant = s.choose(load=busy_fraction)      # QuantumGranted | None
    s.complete(grant.task_id, results=len(rows), done=last_chunk)
    s.cancel(eid); s.accelerate(eid, 50); s.feedback(eid); s.tick()
"""

from scheduler.clock import Clock, ManualClock, MonotonicClock
from scheduler.config import SchedulerConfig
from scheduler.errors import (
    DuplicateTask,
    InvalidSchedulerConfig,
    InvalidTaskSpec,
    InvalidTickets,
    MoiraeError,
    SchedulerError,
    TaskNotRunning,
    UnknownEvent,
    UnknownTask,
)
from scheduler.events import (
    QuantumCompleted,
    QuantumGranted,
    SchedulerEvent,
    TaskCancelled,
    TaskDiscarded,
    TaskFinished,
    TaskResumed,
    TaskSubmitted,
    TaskSuspended,
    TicketsChanged,
    event_dict,
)
from scheduler.fairness import absolute_error, relative_error, stride_pair_bound
from scheduler.model import Priority, TaskInfo, TaskState
from scheduler.scheduler import StrideScheduler
from scheduler.stride import StrideQueue

__all__ = [
    "Clock",
    "DuplicateTask",
    "InvalidSchedulerConfig",
    "InvalidTaskSpec",
    "InvalidTickets",
    "ManualClock",
    "MoiraeError",
    "MonotonicClock",
    "Priority",
    "QuantumCompleted",
    "QuantumGranted",
    "SchedulerConfig",
    "SchedulerError",
    "SchedulerEvent",
    "StrideQueue",
    "StrideScheduler",
    "TaskCancelled",
    "TaskDiscarded",
    "TaskFinished",
    "TaskInfo",
    "TaskNotRunning",
    "TaskResumed",
    "TaskState",
    "TaskSubmitted",
    "TaskSuspended",
    "TicketsChanged",
    "UnknownEvent",
    "UnknownTask",
    "absolute_error",
    "event_dict",
    "relative_error",
    "stride_pair_bound",
]
