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
holds how each task ended.

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
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from archive.abc import ChunkStore
from recall.api import EndReason, Interval, Output, OutputKind, RecallOperator
from recall.outputs import Bus
from recall.task import RecallTask, TaskDescription, TaskIds, TaskStatus, TaskView, plan_chunks
from scheduler.clock import Clock, MonotonicClock
from scheduler.errors import MoiraeError, UnknownEvent
from scheduler.events import TaskSuspended
from scheduler.model import Priority, TaskState
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
class _Worker:
    name: str
    thread: threading.Thread | None = None
    conn: Any = None
    task: RecallTask | None = None
    in_query: bool = False
    backend_pid: int | None = None


@dataclass
class _Event:
    eid: str
    event_ts: Any
    tasks: dict[str, RecallTask | None] = field(default_factory=dict)  # task id -> task while open
    reasons: dict[str, str] = field(default_factory=dict)
    operators: dict[str, None] = field(default_factory=dict)
    max_seq: int = -1
    closed: bool = False


class RecallManager:
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
        self._workers = [_Worker(f"moirae-recall-{i}") for i in range(max_concurrent)]
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
        return [self._submit(desc.recall_operator.task_for(event), desc) for desc in descs]

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

    def _submit(self, spec: Any, desc: TaskDescription) -> str:
        if self._closing:
            raise ManagerClosed(f"the Recall Manager is closed; cannot submit event {spec.eid!r}")
        if spec.event_ts.tzinfo is None:
            raise ValueError(f"event {spec.eid!r}: event_ts must be timezone-aware, got {spec.event_ts!r}")
        chunks = plan_chunks(self.store.chunk_ids(spec.query.streams), self.store.grid, spec.event_ts,
                             spec.bound)
        task = RecallTask(self._ids.next(), spec, desc, chunks, self.clock.now())
        task.state = desc.recall_operator.start(spec)
        with self._cond:
            desc.template = spec.query
            desc.submitted += 1
            ev = self._events.get(spec.eid)
            if ev is None or ev.closed:
                ev = self._events[spec.eid] = _Event(spec.eid, spec.event_ts)
            ev.tasks[task.task_id] = task
            ev.operators[spec.operator] = None
            self._tasks[task.task_id] = task
            if chunks:
                self.scheduler.submit(
                    spec.eid,
                    tickets=spec.tickets,
                    priority=Priority.MATERIALIZATION if spec.materialization else Priority.QUERY,
                    bounded=spec.bound is not None,
                    feedback_period=spec.feedback_period,
                    feedback_timeout=spec.feedback_timeout,
                    task_id=task.task_id,
                )
                self._cond.notify_all()
                return task.task_id
            task.status = TaskStatus.ENDING
        self._end(task, EndReason.DONE)  # nothing in the archive for it: done at once
        return task.task_id

    # -- the workers ---------------------------------------------------------------
    def _work(self, w: _Worker) -> None:
        try:
            while self._quantum(w):
                pass
        finally:
            self._close_conn(w)

    def _quantum(self, w: _Worker) -> bool:
        """One scheduling round of worker ``w``; False when the manager closes."""
        with self._cond:
            while True:
                if self._closing:
                    return False
                busy = sum(1 for x in self._workers if x.task is not None)
                grant = self.scheduler.choose(load=busy / self.max_concurrent)
                if grant is not None:
                    break
                self._cond.wait(0.5)
            task = self._tasks[grant.task_id]
            task.status = TaskStatus.RUNNING
            task.worker = w
            w.task = task
            w.in_query = True
            chunk_id = task.next_chunk
        assert chunk_id is not None  # a task leaves the scheduler when its chunks run out
        t0 = self.clock.now()
        rows = None
        error: str | None = None
        try:
            conn = self._conn(w)
            rows = self.store.run_history_query(task.spec.query, task.spec.params, chunk_id, conn=conn,
                                                timeout_ms=self.timeout_ms)
        except Exception as exc:
            error = f"history-query over chunk {chunk_id} failed: {type(exc).__name__}: {exc}".strip()
            self._reset_conn(w)
        with self._cond:
            w.in_query = False  # from here on no conn.cancel() may target this task
            stop = task.stop
        outputs: list[Output] = []
        covered: Interval | None = None
        if stop is None and error is None:
            covered = task.covered(self.store.grid, chunk_id)
            try:
                outputs = list(task.description.recall_operator.on_chunk(task.state, chunk_id, covered, rows))
            except Exception as exc:
                error = f"operator {task.spec.operator!r} failed on chunk {chunk_id}: {type(exc).__name__}: {exc}"
        elapsed = self.clock.now() - t0
        n_rows = 0 if rows is None else len(rows)
        if stop is None and error is None:
            self._emit(task, outputs)
        with self._cond:
            task.time_spent += elapsed
            w.task = None
            task.worker = None
            if error is None and stop is None:
                task.next_index += 1
                task.rows += n_rows
                if task.first_chunk_at is None:
                    task.first_chunk_at = self.clock.now()
            end: EndReason | None = task.stop
            if end is not None:  # cancelled / discarded meanwhile: the scheduler forgets it
                self.scheduler.complete(task.task_id, results=n_rows)
            elif error is not None:
                task.error = error
                end = EndReason.FAILED
                self.scheduler.complete(task.task_id, results=0, done=True)
            else:
                done = task.next_chunk is None
                events = self.scheduler.complete(task.task_id, results=n_rows, done=done)
                if done:
                    end = EndReason.DONE
                elif any(isinstance(e, TaskSuspended) for e in events):
                    task.status = TaskStatus.SUSPENDED
                else:
                    task.status = TaskStatus.RUNNABLE
            if end is not None:
                task.status = TaskStatus.ENDING
            self._cond.notify_all()
        if end is not None:
            if end is EndReason.FAILED:
                log.warning("recall task %s (event %s) failed: %s", task.task_id, task.spec.eid, error)
            self._end(task, end)
        return True

    def _conn(self, w: _Worker) -> Any:
        if w.conn is None or getattr(w.conn, "closed", False):
            w.conn = self.store.connect()
            try:
                w.backend_pid = w.conn.get_backend_pid()
            except Exception:  # not a psycopg2 connection: fine, only used for introspection
                w.backend_pid = None
        return w.conn

    def _reset_conn(self, w: _Worker) -> None:
        """After a failed or cancelled query: roll back, or drop a broken connection."""
        if w.conn is None:
            return
        try:
            if not w.conn.closed:
                w.conn.rollback()
                return
        except Exception:
            pass
        self._close_conn(w)

    @staticmethod
    def _close_conn(w: _Worker) -> None:
        conn, w.conn, w.backend_pid = w.conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

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
            if all(t is None for t in ev.tasks.values()):
                ops = sorted(ev.operators)
                boundary = Output(
                    operator=",".join(ops), eid=ev.eid, event_ts=ev.event_ts, kind=OutputKind.BOUNDARY,
                    seq=ev.max_seq + 1, key="", row={"tasks": len(ev.tasks), "ended": dict(ev.reasons)},
                    covered=None,
                )
                ev.closed = True
            task.state = None  # the operator's state is released with the task
            self._cond.notify_all()
        if boundary is not None:
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

    # -- steering (M 4.4) ----------------------------------------------------------
    def cancel(self, eid: str, wait: float | None = None) -> int:
        """Cancel every task of ``eid``: out of the scheduler, its running queries
        cancelled in PostgreSQL, its boundary published. Waits (up to ``wait`` seconds,
        default ``cancel_wait``) until every one has ended; returns how many tasks were
        cancelled. Raises UnknownEvent if the event has no open task."""
        deadline = self._wait_deadline(wait)
        with self._cond:
            ev = self._events.get(eid)
            if ev is None or ev.closed:
                raise UnknownEvent(f"no open recall task for event {eid!r}")
            try:
                ids = self.scheduler.cancel(eid)
            except UnknownEvent:
                ids = ()
            idle, running = self._stop_tasks(ids, EndReason.CANCELLED)
        for task in idle:
            self._end(task, EndReason.CANCELLED)
        self._await_running(running, deadline)
        return len(ids)

    def expire_feedback(self, now: float | None = None) -> list[str]:
        """Discard the tasks of every event whose feedback deadline has passed
        (``now >= deadline``, clock time, M 4.4); returns the discarded task ids."""
        with self._cond:
            discarded = self.scheduler.expire(self.clock.now() if now is None else now)
            ids = [d.task_id for d in discarded]
            idle, running = self._stop_tasks(ids, EndReason.DISCARDED)
        for task in idle:
            self._end(task, EndReason.DISCARDED)
        self._await_running(running, self._wait_deadline(None))
        return ids

    def _stop_tasks(self, ids: Iterable[str], reason: EndReason) -> tuple[list[RecallTask], list[RecallTask]]:
        """Under the lock: mark tasks taken from the scheduler as stopped; cancel the
        queries of running ones (their workers end them); return (idle, running)."""
        idle, running = [], []
        for tid in ids:
            task = self._tasks.get(tid)
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
        with self._cond:
            while True:
                left = [t for t in running if t.task_id in self._tasks or not self._boundary_done(t)]
                if not left:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("tasks %s did not stop within the cancel wait", [t.task_id for t in left])
                    return
                self._cond.wait(min(0.05, remaining))
                for t in left:  # a cancel sent before the query reached the server is lost: resend
                    self._cancel_query(t)

    def _boundary_done(self, task: RecallTask) -> bool:
        # a closed event record still present means its boundary is being published
        ev = self._events.get(task.spec.eid)
        return ev is None or not ev.closed

    def _wait_deadline(self, wait: float | None) -> float:
        # real time on purpose: how long a caller blocks, not a decision of the logic
        return time.monotonic() + (self.cancel_wait if wait is None else wait)

    def accelerate(self, eid: str, tickets: int) -> int:
        """Give every task of ``eid`` ``tickets`` more tickets (it also counts as
        feedback); returns how many tasks were accelerated."""
        with self._cond:
            n = len(self.scheduler.tasks(eid))
            self.scheduler.accelerate(eid, tickets)
            self._sync_resumed(eid)
            self._cond.notify_all()
            return n

    def feedback(self, eid: str) -> list[str]:
        """The user's explicit "continue" for ``eid``: resume its suspended tasks and
        restart their feedback periods. Returns the resumed task ids."""
        with self._cond:
            resumed = list(self.scheduler.feedback(eid))
            self._sync_resumed(eid)
            self._cond.notify_all()
            return resumed

    def _sync_resumed(self, eid: str) -> None:
        for info in self.scheduler.tasks(eid):
            task = self._tasks.get(info.task_id)
            if task is not None and task.status is TaskStatus.SUSPENDED and info.state is TaskState.RUNNABLE:
                task.status = TaskStatus.RUNNABLE

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
        for eid in events:
            try:
                self.cancel(eid, wait=timeout)
            except UnknownEvent:  # ended meanwhile
                pass
        for w in self._workers:
            if w.thread is not None:
                w.thread.join(timeout)

    def __enter__(self) -> RecallManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
