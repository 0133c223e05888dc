"""The Recall Manager (M 4.3, 4.4; docs/ARCHITECTURE.md).

Recall operators are registered once (their *task description*, M fig. 9); for each new
event, :meth:`RecallManager.submit` makes one recall task per operator and hands it to
the scheduler. ``max_concurrent`` worker threads each own one PostgreSQL connection
(``store.connect()``) and loop: ask the scheduler which task runs next
(``choose``), run that task's history-query over its next chunk, newest first (M 4.3),
give the rows to the task's operator, ``complete`` the quantum with the number of rows
(tickets are deducted in proportion, M 4.4), publish the operator's outputs. So at most
``max_concurrent`` history-queries are ever in PostgreSQL at once (M 4.4: "no more than a
fixed number of historical queries execute within the RDBMS at any time").

A task ends when it has visited every chunk of its snapshot or reached its time bound
(``done``), when its event is cancelled, when its event's feedback deadline passes
(``discarded``), or when a history-query or its operator fails (``failed``, the error
kept in the task's statistics; the event's other tasks go on). The operator's
``on_end`` outputs are published, and once *every* task of an event has ended the
manager publishes exactly one ``BOUNDARY`` output for the event (M 4.6: "the Recall
Manager produces the boundary tuples"). Its ``seq`` follows every output of the event;
its ``operator`` is the event's operator (several: their names joined by ``,``); its row
holds how each task ended. A task submitted for an event whose boundary has already
been published opens a new round for that event, closed by its own boundary.

Steering (M 4.4):

- :meth:`cancel` removes the event's tasks from the scheduler, cancels any of their
  queries running in PostgreSQL (``conn.cancel()`` from the calling thread, repeated
  until the worker returns) and waits until they are gone. The worker's connection
  is back in its pool at once; nothing of a cancelled task is kept (no thread,
  connection, task object or statistics record).
- :meth:`accelerate` adds tickets; :meth:`feedback` resumes tasks suspended for
  feedback; :meth:`expire_feedback` (run periodically, :mod:`recall.periodic`) discards
  the tasks of events whose feedback deadline has passed, by the injected clock.

Composition: the manager owns the shared bookkeeping (:class:`~recall.manager_state.ManagerState`),
the output publisher and the task lifecycle (:mod:`recall.manager_state`), a
:class:`~recall.manager_worker.WorkerPool` and a :class:`~recall.manager_steer.Steering`,
each handed only what it uses; the manager itself registers operators, submits tasks and
answers introspection.

Threads: ``max_concurrent`` workers, no dispatcher: each worker asks the scheduler
itself, under the manager's one lock (the scheduler is not thread-safe). Operators'
``start`` / ``on_chunk`` / ``on_end`` and the output callbacks run outside that lock;
``on_chunk`` may run concurrently for *different* tasks of one operator, never for one
task. A cancelling thread never races a worker for a connection: a worker leaves its
query only after taking the lock, and ``conn.cancel()`` is only sent under that lock
while the query is known to be the cancelled task's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from archive.abc import ChunkStore
from recall.abc import RecallOperator
from recall.api import EndReason
from recall.errors import DuplicateOperator, ManagerClosed, RecallManagerError, UnknownOperator
from recall.manager_state import ManagerState, OutputPublisher, OutputSink, TaskLifecycle
from recall.manager_steer import Steering
from recall.manager_worker import WorkerPool
from recall.outputs import Bus
from recall.replica2 import HistoryReplica, start_of_search
from recall.task import RecallTask, TaskDescription, TaskIds, TaskStatus, TaskView, plan_chunks
from scheduler.abc import SchedulingPolicy
from scheduler.clock import Clock, MonotonicClock
from scheduler.model import Priority
from scheduler.scheduler import StrideScheduler

log = logging.getLogger("recall.manager")

__all__ = ["DuplicateOperator", "ManagerClosed", "OutputSink", "RecallManager", "RecallManagerError",
           "UnknownOperator"]


class RecallManager:
    """Runs recall tasks chunk by chunk through a scheduling policy (see the module docstring).

    ``scheduler`` is a :class:`scheduler.abc.SchedulingPolicy` (default: a new
    :class:`~scheduler.scheduler.StrideScheduler` on ``clock``; the FIFO baseline is
    :class:`scheduler.fifo.FifoScheduler`). ``on_output`` is one callable or several,
    called with every :class:`~recall.api.Output` (e.g. a
    :class:`recall.outputs.StoredOutputs`); every output is also published on
    :attr:`bus`. ``timeout_ms`` is the statement timeout of each history-query;
    ``retention`` how long (clock seconds) statistics of ended tasks stay visible in
    :meth:`tasks` before :meth:`reap` drops them.
    """

    def __init__(
        self,
        store: ChunkStore,
        scheduler: SchedulingPolicy | None = None,
        *,
        max_concurrent: int = 4,
        clock: Clock | None = None,
        on_output: OutputSink | Iterable[OutputSink] | None = None,
        bus: Bus | None = None,
        timeout_ms: int | None = 30_000,
        retention: float = 600.0,
        cancel_wait: float = 10.0,
    ) -> None:
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        self.store = store
        self.clock: Clock = clock or (scheduler.clock if scheduler is not None else None) or MonotonicClock()
        self.scheduler = scheduler if scheduler is not None else StrideScheduler(clock=self.clock)
        self.retention = retention
        self.bus = bus or Bus()
        self._state = ManagerState(self.scheduler, self.clock)
        self._publisher = OutputPublisher(on_output, self.bus, self.clock)
        self._lifecycle = TaskLifecycle(self._state, self._publisher)
        self._steering = Steering(self._state, self._lifecycle, cancel_wait=cancel_wait)
        self._descriptions: dict[str, TaskDescription] = {}
        self._ids = TaskIds()
        self._pool = WorkerPool(self._state, self._lifecycle, store, max_concurrent=max_concurrent,
                                timeout_ms=timeout_ms)
        self._pool.start()

    # -- settings held by the collaborators ------------------------------------------
    @property
    def max_concurrent(self) -> int:
        return self._pool.max_concurrent

    @property
    def timeout_ms(self) -> int | None:
        return self._pool.timeout_ms

    @property
    def cancel_wait(self) -> float:
        return self._steering.cancel_wait

    @property
    def sink_errors(self) -> int:
        """How many times an output sink raised (each logged, never propagated)."""
        return self._publisher.sink_errors

    # -- operators and submission ----------------------------------------------------
    def register(self, operator: RecallOperator) -> TaskDescription:
        """Deploy a recall operator: its task description (M fig. 9) is created."""
        with self._state.cond:
            if operator.name in self._descriptions:
                raise DuplicateOperator(f"recall operator {operator.name!r} is already registered")
            desc = TaskDescription(operator.name, operator, self.clock.now())
            self._descriptions[operator.name] = desc
            return desc

    def unregister(self, name: str) -> None:
        """Forget an operator (its running tasks go on until they end)."""
        with self._state.cond:
            self._description(name)
            del self._descriptions[name]

    def descriptions(self) -> list[TaskDescription]:
        with self._state.cond:
            return list(self._descriptions.values())

    def add_sink(self, sink: OutputSink) -> None:
        self._publisher.add_sink(sink)

    def set_replica(self, replica: HistoryReplica | None, units: int | None = None) -> None:
        """Let tasks that run out of materialized history go on over the raw archive
        (replica2, :mod:`recall.replica2`); ``units``: raw units one quantum re-processes
        at most. None turns it off (such a task then ends ``done`` with what it found)."""
        self._pool.replica = replica
        if units is not None:
            if units < 1:
                raise ValueError(f"replica units per quantum must be >= 1, got {units!r}")
            self._pool.replica_units = units

    @property
    def replica(self) -> HistoryReplica | None:
        return self._pool.replica

    def submit(self, event: Mapping[str, Any], operators: str | Iterable[str]) -> list[str]:
        """Make and schedule one recall task per named operator for ``event`` (the
        operator's ``task_for(event)`` builds its :class:`~recall.api.TaskSpec`);
        returns the task ids."""
        names = [operators] if isinstance(operators, str) else list(operators)
        descs = [self._description(n) for n in names]
        specs = [desc.recall_operator.task_for(event) for desc in descs]
        if not specs:
            return []
        st = self._state
        # All tasks of this call are announced first, so one that ends at once (a failed
        # first query, an empty archive) cannot close the event before its siblings exist.
        with st.cond:
            ev = st.open_event(specs[0].eid, specs[0].event_ts)
            ev.pending += len(specs)
        ids = []
        try:
            for i, (spec, desc) in enumerate(zip(specs, descs, strict=True)):
                try:
                    ids.append(self._submit(spec, desc, announced=True))
                except BaseException:
                    with st.cond:
                        ev.pending -= len(specs) - i
                    raise
        finally:
            with st.cond:
                boundary = self._lifecycle.close_if_done(ev)
                if not ev.tasks and not ev.pending and st.events.get(ev.eid) is ev:
                    del st.events[ev.eid]  # a refused submission leaves nothing behind
            if boundary is not None:
                self._lifecycle.publish_boundary(ev, boundary)
        return ids

    def submit_spec(self, spec: Any) -> str:
        """Schedule a task from a ready :class:`~recall.api.TaskSpec` of a registered
        operator (``spec.operator``)."""
        return self._submit(spec, self._description(spec.operator))

    def _description(self, name: str) -> TaskDescription:
        with self._state.cond:
            try:
                return self._descriptions[name]
            except KeyError:
                raise UnknownOperator(f"no recall operator named {name!r} is registered") from None

    def _submit(self, spec: Any, desc: TaskDescription, announced: bool = False) -> str:
        if spec.event_ts.tzinfo is None:
            raise ValueError(f"event {spec.eid!r}: event_ts must be timezone-aware, got {spec.event_ts!r}")
        chunks = plan_chunks(self.store.chunk_ids(spec.query.streams), self.store.grid_for(spec.query.streams),
                             spec.event_ts, spec.bound)
        task = RecallTask(self._ids.next(), spec, desc, chunks, self.clock.now())
        replica = self._pool.replica
        if replica is not None and not spec.materialization:  # what replica2 may add (recall.replica2)
            grid = self.store.grid_for(spec.query.streams)
            task.history_before = start_of_search(spec, chunks, grid)
            try:
                task.history_remaining = replica.remaining(spec.query.streams, task.history_before, spec.bound)
            except Exception:  # the task still reads what is materialized
                log.exception("recall: raw history of %s unknown; task of %s reads materialized chunks only",
                              spec.operator, spec.eid)
            task.materialized_until = task.history_before if chunks else None
        task.state = desc.recall_operator.start(spec)
        st = self._state
        with st.cond:
            if st.closing:
                raise ManagerClosed(f"the Recall Manager is closed; cannot submit event {spec.eid!r}")
            runnable = bool(chunks) or task.more_history
            if runnable:  # first, so a refused submission (bad tickets, say) leaves nothing behind
                self.scheduler.submit(
                    spec.eid,
                    tickets=spec.tickets,
                    priority=Priority.MATERIALIZATION if spec.materialization else Priority.QUERY,
                    bounded=spec.bound is not None,
                    feedback_period=spec.feedback_period,
                    feedback_timeout=spec.feedback_timeout,
                    task_id=task.task_id,
                )
            desc.template = spec.query
            desc.submitted += 1
            ev = st.open_event(spec.eid, spec.event_ts)
            if announced:
                ev.pending -= 1
            ev.tasks[task.task_id] = task
            ev.operators[spec.operator] = None
            st.tasks[task.task_id] = task
            if runnable:
                st.cond.notify_all()
                return task.task_id
            task.status = TaskStatus.ENDING
        self._lifecycle.end(task, EndReason.DONE)  # nothing in the archive for it: done at once
        return task.task_id

    # -- steering (recall.manager_steer) ---------------------------------------------
    def cancel(self, eid: str, wait: float | None = None) -> int:
        """Cancel every task of ``eid`` (see :meth:`recall.manager_steer.Steering.cancel`);
        returns how many tasks were cancelled. Raises UnknownEvent if it has no open task."""
        return self._steering.cancel(eid, wait)

    def cancel_many(self, eids: Iterable[str], wait: float | None = None) -> dict[str, int]:
        """Cancel every task of each event in ``eids`` at once; per event with open
        tasks, how many were cancelled."""
        return self._steering.cancel_many(eids, wait)

    def expire_feedback(self, now: float | None = None) -> list[str]:
        """Discard the tasks of every event whose feedback deadline has passed; returns
        the discarded task ids."""
        return self._steering.expire_feedback(now)

    def accelerate(self, eid: str, tickets: int) -> int:
        """Give every task of ``eid`` ``tickets`` more tickets (also feedback); returns
        how many tasks were accelerated."""
        return self._steering.accelerate(eid, tickets)

    def feedback(self, eid: str) -> list[str]:
        """Resume the suspended tasks of ``eid``; returns their ids."""
        return self._steering.feedback(eid)

    # -- introspection -------------------------------------------------------------
    def tasks(self, eid: str | None = None) -> list[TaskView]:
        """Statistics of open tasks and of ended ones still within ``retention``
        (cancelled tasks are not kept), in submission order."""
        st = self._state
        with st.cond:
            out = [self._view(task) for task in st.tasks.values() if eid is None or task.spec.eid == eid]
            out.extend(v for v in st.finished.values() if eid is None or v.eid == eid)
        return sorted(out, key=lambda v: int(v.task_id[1:]))

    def _view(self, task: RecallTask) -> TaskView:
        tickets = None
        try:
            tickets = self.scheduler.task(task.task_id).tickets
        except LookupError:
            pass
        return task.view(tickets)

    def task(self, task_id: str) -> TaskView:
        for v in self.tasks():
            if v.task_id == task_id:
                return v
        raise KeyError(f"no recall task {task_id!r} (unknown, cancelled or reaped)")

    def open_events(self) -> list[str]:
        with self._state.cond:
            return [e for e, ev in self._state.events.items() if not ev.closed]

    def reap(self, now: float | None = None) -> int:
        """Drop statistics of tasks that ended ``retention`` seconds ago or more."""
        t = self.clock.now() if now is None else now
        st = self._state
        with st.cond:
            old = [k for k, v in st.finished.items() if v.ended_at is not None and t - v.ended_at >= self.retention]
            for k in old:
                del st.finished[k]
            return len(old)

    def connections(self) -> list[int]:
        """Backend pids of the workers' open connections (at most ``max_concurrent``)."""
        return self._pool.connections()

    def running(self) -> int:
        """History-queries in flight now."""
        return self._pool.running()

    def threads(self) -> list[threading.Thread]:
        return self._pool.threads()

    # -- shutdown ------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """End every open task as cancelled (running queries are cancelled, boundaries
        published), stop the workers and close their connections. Idempotent."""
        st = self._state
        with st.cond:
            if st.closing:
                return
            st.closing = True  # no new submissions; workers stop after their quantum
            events = [e for e, ev in st.events.items() if not ev.closed]
            st.cond.notify_all()
        self._steering.cancel_many(events, wait=timeout)
        self._pool.join(timeout)

    def __enter__(self) -> RecallManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
