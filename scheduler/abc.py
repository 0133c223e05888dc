"""The scheduling policy: the extension point that decides which recall task runs next.

The Recall Manager (:mod:`recall.manager`) drives any :class:`SchedulingPolicy`. It
submits one task per (event, recall operator), then loops: :meth:`~SchedulingPolicy.choose`
grants the next quantum (one history-query over one chunk), and when the query ends
:meth:`~SchedulingPolicy.complete` reports how many results it produced. Steering by
event id (``accelerate``, ``feedback``, ``cancel``, ``expire``) takes effect at the next
``choose``. Two policies implement it: :class:`scheduler.scheduler.StrideScheduler`
(M 4.4, proportional share with ticket deduction) and :class:`scheduler.fifo.FifoScheduler`
(oldest runnable task first, the fairness baseline).

Contract every policy keeps (tests/scheduler/test_policy_contract.py checks it):

- a running task is never granted again before its ``complete``;
- QUERY tasks are granted before MATERIALIZATION tasks when both are runnable and the
  caller reports a busy system;
- a task with a ``feedback_period`` (and no time bound) suspends after that many steps
  (chunks: a quantum reads one, or ``steps`` when its ``complete`` says so, never more
  than :meth:`~SchedulingPolicy.steps_left`), resumes on ``feedback``/``accelerate``, and is discarded by ``expire`` once its
  feedback deadline (by the policy's clock) has passed;
- ``cancel`` of a running task removes it at once; its late ``complete`` is accepted and
  forgotten;
- tickets are checked by :func:`scheduler.tickets.check_tickets`; unknown ids raise
  :class:`~scheduler.errors.UnknownTask` / :class:`~scheduler.errors.UnknownEvent`.

Time comes only from the policy's ``clock``; a policy does no I/O, starts no threads
and is not thread-safe (the caller serialises calls).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from scheduler.clock import Clock
from scheduler.events import QuantumGranted, SchedulerEvent, TaskDiscarded
from scheduler.model import Priority, TaskInfo


class SchedulingPolicy(ABC):
    """Decides which recall task's next quantum runs (see the module docstring)."""

    clock: Clock

    @abstractmethod
    def submit(self, eid: str, *, tickets: int | None = None, priority: Priority = Priority.QUERY,
               bounded: bool = False, feedback_period: int | None = None,
               feedback_timeout: float | None = None, task_id: str | None = None) -> str:
        """Add a runnable task for event ``eid``; returns its id (``task_id`` if given)."""

    @abstractmethod
    def choose(self, load: float | None = None) -> QuantumGranted | None:
        """Grant the next quantum, or None if no task is runnable. ``load`` is the
        fraction of history-query slots busy if this one is filled."""

    @abstractmethod
    def complete(self, task_id: str, *, results: int = 0, done: bool = False,
                 steps: int = 1) -> tuple[SchedulerEvent, ...]:
        """End the task's quantum in flight, having produced ``results`` rows over
        ``steps`` chunks (counted towards its feedback period); ``done`` ends the task.
        Returns what happened (e.g. a ``TaskSuspended``)."""

    def steps_left(self, task_id: str) -> int | None:
        """How many chunks the task's next quantum may read before it must suspend for
        feedback (None: no feedback period). This default allows one: a policy that
        counts steps says more."""
        return 1

    @abstractmethod
    def feedback(self, eid: str) -> tuple[str, ...]:
        """The user's "continue" for ``eid``: resume suspended tasks; returns their ids."""

    @abstractmethod
    def accelerate(self, eid: str, tickets: int) -> tuple[SchedulerEvent, ...]:
        """Give every task of ``eid`` ``tickets`` more tickets (also counts as feedback)."""

    @abstractmethod
    def cancel(self, eid: str) -> tuple[str, ...]:
        """Remove every task of ``eid``; returns their ids."""

    @abstractmethod
    def expire(self, now: float | None = None) -> tuple[TaskDiscarded, ...]:
        """Discard every task of each event whose feedback deadline is at or before ``now``."""

    @abstractmethod
    def next_deadline(self) -> float | None:
        """The earliest feedback deadline of a suspended task, if any."""

    @abstractmethod
    def task(self, task_id: str) -> TaskInfo:
        """A snapshot of one task."""

    @abstractmethod
    def tasks(self, eid: str | None = None) -> tuple[TaskInfo, ...]:
        """Snapshots of every task (of ``eid``, if given)."""

    @abstractmethod
    def in_flight(self, priority: Priority | None = None) -> int:
        """Quanta granted and not yet completed (of ``priority``, if given)."""

    @abstractmethod
    def __len__(self) -> int:
        """How many tasks the policy holds."""
