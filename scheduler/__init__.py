"""Scheduling of recall tasks (M 4.4): pure policies, stdlib only.

The extension point is :class:`SchedulingPolicy` (:mod:`scheduler.abc`); the Recall
Manager drives any implementation. :class:`StrideScheduler` is the paper's policy,
:class:`FifoScheduler` the arrival-order baseline. Ticket counts from any caller are
checked by :func:`check_tickets`. Errors derive from :class:`SchedulerError`.

Usage::

    s = StrideScheduler(SchedulerConfig(...), clock=clock, listener=log)
    tid = s.submit(eid, tickets=100, priority=Priority.QUERY, bounded=False,
                   feedback_period=5, feedback_timeout=60.0)
    grant = s.choose(load=busy_fraction)      # QuantumGranted | None
    s.complete(grant.task_id, results=len(rows), done=last_chunk)
    s.cancel(eid); s.accelerate(eid, 50); s.feedback(eid); s.tick()
"""

from scheduler.abc import SchedulingPolicy
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
from scheduler.fifo import FifoScheduler
from scheduler.model import Priority, TaskInfo, TaskState
from scheduler.scheduler import StrideScheduler
from scheduler.stride import StrideQueue
from scheduler.tickets import MAX_TICKETS, check_tickets, parse_tickets

__all__ = [
    "MAX_TICKETS",
    "Clock",
    "DuplicateTask",
    "FifoScheduler",
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
    "SchedulingPolicy",
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
    "check_tickets",
    "event_dict",
    "parse_tickets",
    "relative_error",
    "stride_pair_bound",
]
