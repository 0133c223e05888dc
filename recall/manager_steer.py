"""Steering of recall tasks by event id (M 4.4; docs/ARCHITECTURE.md).

- ``cancel(eid)``: the scheduler drops every task of the event; tasks not running end
  here at once; for running ones ``conn.cancel()`` is sent from the calling thread
  (under the manager's lock, while the worker is known to be in *that* task's query)
  and re-sent every 50 ms until the worker comes back, since a cancel that reaches the
  server before the query does is ignored by PostgreSQL. The worker then ends the task
  and keeps its connection for the next task.
- ``cancel_many(eids)``: the same for many events at once: one pass under the lock
  takes all their tasks from the scheduler and cancels every running query, then the
  idle tasks end and the caller waits once for all the running ones (a cancel storm
  costs one wait, not one per event).
- ``expire_feedback()``: the same for events whose feedback deadline has passed, by the
  injected clock (``now >= deadline`` discards).
- ``accelerate(eid, n)`` adds tickets (and counts as feedback); ``feedback(eid)``
  resumes suspended tasks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from recall.api import EndReason
from recall.manager_state import ManagerState, TaskLifecycle
from recall.task import RecallTask, TaskStatus
from scheduler.errors import UnknownEvent
from scheduler.model import TaskState

log = logging.getLogger("recall.manager")


class Steering:
    """Cancel, accelerate, feedback and feedback expiry over the shared ``state``; tasks
    are ended through ``lifecycle``. ``cancel_wait`` is how long (real seconds) a cancel
    waits by default for running queries to stop."""

    def __init__(self, state: ManagerState, lifecycle: TaskLifecycle, *, cancel_wait: float) -> None:
        self.state = state
        self.lifecycle = lifecycle
        self.cancel_wait = cancel_wait

    def cancel(self, eid: str, wait: float | None = None) -> int:
        """Cancel every task of ``eid``: out of the scheduler, its running queries
        cancelled in PostgreSQL, its boundary published. Waits (up to ``wait`` seconds,
        default ``cancel_wait``) until every one has ended; returns how many tasks were
        cancelled. Raises UnknownEvent if the event has no open task."""
        with self.state.cond:
            if not self.state.is_open(eid):
                raise UnknownEvent(f"no open recall task for event {eid!r}")
        return self.cancel_many([eid], wait).get(eid, 0)

    def cancel_many(self, eids: Iterable[str], wait: float | None = None) -> dict[str, int]:
        """Cancel every task of each event in ``eids`` (as :meth:`cancel`, all at once);
        returns, per event that had open tasks, how many were cancelled. Events with no
        open task are left out (not an error: a storm may race their ends)."""
        deadline = self._wait_deadline(wait)
        counts: dict[str, int] = {}
        idle: list[RecallTask] = []
        running: list[RecallTask] = []
        with self.state.cond:
            for eid in dict.fromkeys(eids):
                if not self.state.is_open(eid):
                    continue
                try:
                    ids = self.state.scheduler.cancel(eid)
                except UnknownEvent:
                    ids = ()
                i, r = self._stop_tasks(ids, EndReason.CANCELLED)
                idle.extend(i)
                running.extend(r)
                counts[eid] = len(ids)
        for task in idle:
            self.lifecycle.end(task, EndReason.CANCELLED)
        self._await_running(running, deadline)
        return counts

    def expire_feedback(self, now: float | None = None) -> list[str]:
        """Discard the tasks of every event whose feedback deadline has passed
        (``now >= deadline``, clock time, M 4.4); returns the discarded task ids."""
        with self.state.cond:
            discarded = self.state.scheduler.expire(self.state.clock.now() if now is None else now)
            ids = [d.task_id for d in discarded]
            idle, running = self._stop_tasks(ids, EndReason.DISCARDED)
        for task in idle:
            self.lifecycle.end(task, EndReason.DISCARDED)
        self._await_running(running, self._wait_deadline(None))
        return ids

    def _stop_tasks(self, ids: Iterable[str], reason: EndReason) -> tuple[list[RecallTask], list[RecallTask]]:
        """Under the lock: mark tasks taken from the scheduler as stopped; cancel the
        queries of running ones (their workers end them); return (idle, running)."""
        idle, running = [], []
        for tid in ids:
            task = self.state.tasks.get(tid)
            if task is None or task.stop is not None:
                continue
            task.stop = reason
            if task.worker is not None:
                running.append(task)
                self._cancel_query(task)
            else:
                task.status = TaskStatus.ENDING
                idle.append(task)
        return idle, running

    def _cancel_query(self, task: RecallTask) -> None:
        w = task.worker
        if w is not None and w.in_query and w.task is task and w.conn is not None:
            try:
                w.conn.cancel()
            except Exception as exc:  # the connection broke: the worker will notice
                log.debug("cancel of task %s's query failed: %s", task.task_id, exc)

    def _await_running(self, running: list[RecallTask], deadline: float) -> None:
        # a worker that cancels from inside an output callback ends its own task later
        me = threading.current_thread()
        running = [t for t in running if t.worker is None or t.worker.thread is not me]
        st = self.state
        with st.cond:
            while True:
                left = [t for t in running if t.task_id in st.tasks or not self.lifecycle.boundary_done(t)]
                if not left:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("tasks %s did not stop within the cancel wait", [t.task_id for t in left])
                    return
                st.cond.wait(min(0.05, remaining))
                for t in left:  # a cancel sent before the query reached the server is lost: resend
                    self._cancel_query(t)

    def _wait_deadline(self, wait: float | None) -> float:
        # real time on purpose: how long a caller blocks, not a decision of the logic
        return time.monotonic() + (self.cancel_wait if wait is None else wait)

    def accelerate(self, eid: str, tickets: int) -> int:
        """Give every task of ``eid`` ``tickets`` more tickets (it also counts as
        feedback); returns how many tasks were accelerated."""
        st = self.state
        with st.cond:
            n = len(st.scheduler.tasks(eid))
            st.scheduler.accelerate(eid, tickets)
            self._sync_resumed(eid)
            st.cond.notify_all()
            return n

    def feedback(self, eid: str) -> list[str]:
        """The user's explicit "continue" for ``eid``: resume its suspended tasks and
        restart their feedback periods. Returns the resumed task ids."""
        st = self.state
        with st.cond:
            resumed = list(st.scheduler.feedback(eid))
            self._sync_resumed(eid)
            st.cond.notify_all()
            return resumed

    def _sync_resumed(self, eid: str) -> None:
        for info in self.state.scheduler.tasks(eid):
            task = self.state.tasks.get(info.task_id)
            if task is not None and task.status is TaskStatus.SUSPENDED and info.state is TaskState.RUNNABLE:
                task.status = TaskStatus.RUNNABLE
