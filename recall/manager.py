"""The Recall Manager (M 4.3, 4.4; DESIGN.md §4 flows 3 and 6).

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from archive.abc import ChunkStore
from recall.api import EndReason, Output, OutputKind, RecallOperator
from recall.manager_steer import Steering
from recall.manager_worker import Worker, WorkerLoop
from recall.outputs import Bus
from recall.task import RecallTask, TaskDescription, TaskIds, TaskStatus, TaskView, plan_chunks
from scheduler.clock import Clock, MonotonicClock
from moirae.base.errors import MoiraeError
from scheduler.model import Priority
from scheduler.scheduler import StrideScheduler

log = logging.getLogger(__name__)

OutputSink = Callable[[Output], None]


class RecallManagerError(MoiraeError):
    """Root of the Recall Manager's errors."""


class UnknownOperator(RecallManagerError, KeyError):
    """An operator name that was never registered."""


class DuplicateOperator(RecallManagerError, ValueError):
    """An operator name registered twice."""


class ManagerClosed(RecallManagerError, RuntimeError):
    """A call on a manager that has been closed."""


@dataclass
class _Event:
    eid: str
    event_ts: Any
    tasks: dict[str, RecallTask | None] = field(default_factory=dict)  # task id -> task while open
    reasons: dict[str, str] = field(default_factory=dict)
    operators: dict[str, None] = field(default_factory=dict)
    max_seq: int = -1
    closed: bool = False
    pending: int = 0  # tasks of an ongoing submit() call not yet registered


class RecallManager(WorkerLoop, Steering):
    """Runs recall tasks chunk by chunk through a scheduler (see the module docstring).

    ``scheduler`` is a :class:`scheduler.scheduler.StrideScheduler` (default: a new one
    on ``clock``) or anything with its interface (e.g.
    :class:`recall.manager_fifo.FifoScheduler`). ``on_output`` is one callable or several,
    called with every :class:`~recall.api.Output` (e.g. a
    :class:`recall.outputs.ResultsTable`); every output is also published on
    :attr:`bus`. ``timeout_ms`` is the statement timeout of each history-query;
    ``retention`` how long (clock seconds) statistics of ended tasks stay visible in
    :meth:`tasks` before :meth:`reap` drops them.
    """

    def __init__(
        self,
        store: ChunkStore,
        scheduler: Any = None,
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
        self.clock: Clock = clock or getattr(scheduler, "clock", None) or MonotonicClock()
        self.scheduler = scheduler if scheduler is not None else StrideScheduler(clock=self.clock)
        self.max_concurrent = max_concurrent
        self.timeout_ms = timeout_ms
        self.retention = retention
        self.cancel_wait = cancel_wait
        self.bus = bus or Bus()
        if on_output is None:
            self._sinks: list[OutputSink] = []
        elif callable(on_output):
            self._sinks = [on_output]
        else:
            self._sinks = list(on_output)
        self.sink_errors = 0
        self._cond = threading.Condition(threading.RLock())
        self._descriptions: dict[str, TaskDescription] = {}
        self._tasks: dict[str, RecallTask] = {}
        self._events: dict[str, _Event] = {}
        self._finished: dict[str, TaskView] = {}
        self._ids = TaskIds()
        self._closing = False
        self._workers = [Worker(f"moirae-recall-{i}") for i in range(max_concurrent)]
        for w in self._workers:
            w.thread = threading.Thread(target=self._work, args=(w,), name=w.name, daemon=True)
            w.thread.start()

    # -- operators and submission ----------------------------------------------------
    def register(self, operator: RecallOperator) -> TaskDescription:
        """Deploy a recall operator: its task description (M fig. 9) is created."""
        with self._cond:
            if operator.name in self._descriptions:
                raise DuplicateOperator(f"recall operator {operator.name!r} is already registered")
            desc = TaskDescription(operator.name, operator, self.clock.now())
            self._descriptions[operator.name] = desc
            return desc

    def unregister(self, name: str) -> None:
        """Forget an operator (its running tasks go on until they end)."""
        with self._cond:
            self._description(name)
            del self._descriptions[name]

    def descriptions(self) -> list[TaskDescription]:
        with self._cond:
            return list(self._descriptions.values())

    def add_sink(self, sink: OutputSink) -> None:
        self._sinks = [*self._sinks, sink]

    def submit(self, event: Mapping[str, Any], operators: str | Iterable[str]) -> list[str]:
        """Make and schedule one recall task per named operator for ``event`` (the
        operator's ``task_for(event)`` builds its :class:`~recall.api.TaskSpec`);
        returns the task ids."""
        names = [operators] if isinstance(operators, str) else list(operators)
        descs = [self._description(n) for n in names]
        specs = [desc.recall_operator.task_for(event) for desc in descs]
        if not specs:
            return []
        # All tasks of this call are announced first, so one that ends at once (a failed
        # first query, an empty archive) cannot close the event before its siblings exist.
        with self._cond:
            ev = self._events.get(specs[0].eid)
            if ev is None or ev.closed:
                ev = self._events[specs[0].eid] = _Event(specs[0].eid, specs[0].event_ts)
            ev.pending += len(specs)
        ids = []
        try:
            for i, (spec, desc) in enumerate(zip(specs, descs, strict=True)):
                try:
                    ids.append(self._submit(spec, desc, announced=True))
                except BaseException:
                    with self._cond:
                        ev.pending -= len(specs) - i
                    raise
        finally:
            with self._cond:
                boundary = self._close_if_done(ev)
                if not ev.tasks and not ev.pending and self._events.get(ev.eid) is ev:
                    del self._events[ev.eid]  # a refused submission leaves nothing behind
            if boundary is not None:
                self._publish_boundary(ev, boundary)
        return ids

    def submit_spec(self, spec: Any) -> str:
        """Schedule a task from a ready :class:`~recall.api.TaskSpec` of a registered
        operator (``spec.operator``)."""
        return self._submit(spec, self._description(spec.operator))

    def _description(self, name: str) -> TaskDescription:
        with self._cond:
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
        task.state = desc.recall_operator.start(spec)
        with self._cond:
            if self._closing:
                raise ManagerClosed(f"the Recall Manager is closed; cannot submit event {spec.eid!r}")
            if chunks:  # first, so a refused submission (bad tickets, say) leaves nothing behind
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
            ev = self._events.get(spec.eid)
            if ev is None or ev.closed:
                ev = self._events[spec.eid] = _Event(spec.eid, spec.event_ts)
            if announced:
                ev.pending -= 1
            ev.tasks[task.task_id] = task
            ev.operators[spec.operator] = None
            self._tasks[task.task_id] = task
            if chunks:
                self._cond.notify_all()
                return task.task_id
            task.status = TaskStatus.ENDING
        self._end(task, EndReason.DONE)  # nothing in the archive for it: done at once
        return task.task_id

    # -- ending tasks and events ---------------------------------------------------
    def _end(self, task: RecallTask, reason: EndReason) -> None:
        """Finish a task whose scheduler entry is already gone; called by exactly one
        thread per task (the worker, or the thread that took it from the scheduler)."""
        outputs: list[Output] = []
        try:
            outputs = list(task.description.recall_operator.on_end(task.state, reason))
        except Exception as exc:
            msg = f"operator {task.spec.operator!r} failed in on_end({reason.value}): {type(exc).__name__}: {exc}"
            task.error = f"{task.error}; {msg}" if task.error else msg
            log.warning("recall task %s: %s", task.task_id, msg)
        if reason is not EndReason.CANCELLED or outputs:
            self._emit(task, outputs)
        boundary: Output | None = None
        with self._cond:
            task.end_reason = reason
            task.status = TaskStatus.ended(reason)
            task.ended_at = self.clock.now()
            task.description.ended += 1
            if reason is not EndReason.CANCELLED:  # cancelled tasks leave nothing behind
                self._finished[task.task_id] = task.view(None)
            del self._tasks[task.task_id]
            ev = self._events[task.spec.eid]
            ev.tasks[task.task_id] = None
            ev.reasons[task.task_id] = reason.value
            ev.max_seq = max(ev.max_seq, task.max_seq)
            boundary = self._close_if_done(ev)
            task.state = None  # the operator's state is released with the task
            self._cond.notify_all()
        if boundary is not None:
            self._publish_boundary(ev, boundary)

    def _close_if_done(self, ev: _Event) -> Output | None:
        """Under the lock: the event's boundary, if every task has ended and no submit()
        is still adding tasks to it (M 4.6: once all of the event's tasks have ended)."""
        if ev.closed or ev.pending or not ev.tasks or not all(t is None for t in ev.tasks.values()):
            return None
        ev.closed = True
        return Output(operator=",".join(sorted(ev.operators)), eid=ev.eid, event_ts=ev.event_ts,
                      kind=OutputKind.BOUNDARY, seq=ev.max_seq + 1, key="",
                      row={"tasks": len(ev.tasks), "ended": dict(ev.reasons)}, covered=None)

    def _publish_boundary(self, ev: _Event, boundary: Output) -> None:
        self._publish(boundary)
        with self._cond:
            if self._events.get(ev.eid) is ev:
                del self._events[ev.eid]
            self._cond.notify_all()

    def _emit(self, task: RecallTask, outputs: list[Output]) -> None:
        if not outputs:
            return
        if task.first_result_at is None:
            task.first_result_at = self.clock.now()
        task.outputs += len(outputs)
        for o in outputs:
            if o.seq > task.max_seq:
                task.max_seq = o.seq
            self._publish(o)

    def _publish(self, output: Output) -> None:
        for sink in self._sinks:
            try:
                sink(output)
            except Exception:
                self.sink_errors += 1
                log.exception("a recall output sink failed on %s/%s", output.operator, output.eid)
        self.bus.publish(output)

    # -- introspection -------------------------------------------------------------
    def tasks(self, eid: str | None = None) -> list[TaskView]:
        """Statistics of open tasks and of ended ones still within ``retention``
        (cancelled tasks are not kept), in submission order."""
        with self._cond:
            out = []
            for task in self._tasks.values():
                if eid is not None and task.spec.eid != eid:
                    continue
                tickets = None
                try:
                    tickets = self.scheduler.task(task.task_id).tickets
                except LookupError:
                    pass
                out.append(task.view(tickets))
            out.extend(v for v in self._finished.values() if eid is None or v.eid == eid)
        return sorted(out, key=lambda v: int(v.task_id[1:]))

    def task(self, task_id: str) -> TaskView:
        for v in self.tasks():
            if v.task_id == task_id:
                return v
        raise KeyError(f"no recall task {task_id!r} (unknown, cancelled or reaped)")

    def open_events(self) -> list[str]:
        with self._cond:
            return [e for e, ev in self._events.items() if not ev.closed]

    def reap(self, now: float | None = None) -> int:
        """Drop statistics of tasks that ended ``retention`` seconds ago or more."""
        t = self.clock.now() if now is None else now
        with self._cond:
            old = [k for k, v in self._finished.items() if v.ended_at is not None and t - v.ended_at >= self.retention]
            for k in old:
                del self._finished[k]
            return len(old)

    def connections(self) -> list[int]:
        """Backend pids of the workers' open connections (at most ``max_concurrent``)."""
        with self._cond:
            return [w.backend_pid for w in self._workers if w.conn is not None and w.backend_pid is not None]

    def running(self) -> int:
        """History-queries in flight now."""
        with self._cond:
            return sum(1 for w in self._workers if w.in_query)

    def threads(self) -> list[threading.Thread]:
        return [w.thread for w in self._workers if w.thread is not None and w.thread.is_alive()]

    # -- shutdown ------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """End every open task as cancelled (running queries are cancelled, boundaries
        published), stop the workers and close their connections. Idempotent."""
        with self._cond:
            if self._closing:
                return
            self._closing = True  # no new submissions; workers stop after their quantum
            events = [e for e, ev in self._events.items() if not ev.closed]
            self._cond.notify_all()
        self.cancel_many(events, wait=timeout)
        for w in self._workers:
            if w.thread is not None:
                w.thread.join(timeout)

    def __enter__(self) -> RecallManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
