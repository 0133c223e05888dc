"""The scheduler's errors. Its root, :class:`SchedulerError`, derives from the project's
root :class:`moirae.base.errors.MoiraeError`, and each also inherits the matching built-in,
so a caller may catch either:

>>> issubclass(InvalidTickets, ValueError), issubclass(InvalidTickets, MoiraeError)
(True, True)
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class SchedulerError(MoiraeError):
    """A scheduling request that cannot be honoured."""


class UnknownTask(SchedulerError, LookupError):
    """A task id (or event id) the scheduler does not hold."""


class UnknownEvent(UnknownTask):
    """An event id with no task in the scheduler (never submitted, or all ended)."""


class DuplicateTask(SchedulerError, ValueError):
    """A task id submitted twice."""


class InvalidTickets(SchedulerError, ValueError):
    """A ticket count that is not a positive integer, or is below the floor."""


class TaskNotRunning(SchedulerError, RuntimeError):
    """``complete`` for a task that holds no quantum in flight."""


class InvalidSchedulerConfig(SchedulerError, ValueError):
    """A scheduler setting out of range; the message names the key and value."""


class InvalidTaskSpec(SchedulerError, ValueError):
    """A bad argument for a task other than its tickets (feedback period or timeout, a
    result count); the message names the task or event and the value."""
