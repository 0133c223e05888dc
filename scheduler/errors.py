"""The project's one root exception.

Every Moirae error derives from :class:`MoiraeError`. It lives here, in the only
stdlib-only package, because the import table of DESIGN.md §2 lets no lower package
import ``moirae``: ``archive``, ``similarity``, ``ananke`` and ``recall`` may import this
one module of ``scheduler`` for it, and ``moirae`` re-exports it.

Subclasses also inherit the matching built-in, so callers may catch either:

>>> class ChunkNotFound(MoiraeError, LookupError): ...
>>> issubclass(ChunkNotFound, LookupError)
True
"""

from __future__ import annotations


class MoiraeError(Exception):
    """Root of every error Moirae raises on purpose. The message names the culprit."""


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
