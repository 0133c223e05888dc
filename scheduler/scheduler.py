"""The stride scheduler of recall tasks (M 4.4).

The Recall Manager submits one task per (event, recall operator) and then loops:
``choose()`` names the task whose next history-query (one chunk, newest first) runs
now; when that query ends the manager calls ``complete(task_id, results=n, done=...)``.
The manager may hold up to N quanta in flight, so ``choose`` can be called while other
quanta run; a running task is never chosen again before its ``complete``.

Policy, all from M 4.4:

- Stride scheduling [49] among tasks of one priority level (:mod:`scheduler.stride`),
  one quantum per history-query. A new task joins at the level's global pass (plus one
  stride, kept within one stride of the lowest active pass: see that module).
- After each quantum, tickets are deducted in proportion to the results it produced
  (``tickets_per_result``, never below ``min_tickets``), so tasks with few results
  run more often. The pass is adjusted as Waldspurger's ``modify`` does.
- ``accelerate(eid, n)`` adds ``n`` tickets to each task of the event; ``cancel(eid)``
  removes them all. Both take effect at the next ``choose``.
- QUERY tasks run before MATERIALIZATION tasks. A materialization task runs when no
  query task is runnable, or, while queries wait, in one of ``background_slots`` when
  the caller reports ``load < light_load``.
- A task with no explicit time bound suspends after every ``feedback_period`` chunks.
  ``feedback(eid)`` (or ``accelerate``) resumes it; if nothing arrives within
  ``feedback_timeout`` seconds, ``expire`` discards every task of the event.

Fairness with quanta in flight: a task's pass is charged when its quantum is granted,
and a running task is skipped, so with N > 1 the next task is the lowest-pass *runnable*
one. The one-quantum pairwise bound (:mod:`scheduler.fairness`) is proven, and tested,
for one quantum at a time; with N in flight a task whose query runs long simply gets
fewer quanta meanwhile (it cannot hold two), and first-chunk-first still holds: a new
task joins no later than the lowest active pass and wins ties there, so it is the next
task of its level granted (after newcomers submitted before it), however many tasks are
open (M 4.4: a new task gets the database at once).

Time comes only from the injected clock. Nothing here does I/O or starts threads; the
caller serialises calls (it is not thread-safe by itself).

>>> from scheduler.clock import ManualClock
>>> s = StrideScheduler(SchedulerConfig(tickets_per_result=0), clock=ManualClock())
>>> a = s.submit("e1", tickets=2); b = s.submit("e2", tickets=1)
>>> picks = []
>>> for _ in range(6):
...     g = s.choose(); _ = s.complete(g.task_id, results=0); picks.append(g.eid)
>>> picks
['e1', 'e2', 'e1', 'e1', 'e2', 'e1']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from math import floor

from scheduler.abc import SchedulingPolicy
from scheduler.clock import Clock, MonotonicClock
from scheduler.config import SchedulerConfig
from scheduler.errors import (
    DuplicateTask,
    InvalidTaskSpec,
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
)
from scheduler.model import Priority, TaskInfo, TaskState
from scheduler.stride import StrideQueue
from scheduler.tickets import check_tickets

Listener = Callable[[SchedulerEvent], None]


@dataclass(slots=True)
class _Task:
    task_id: str
    eid: str
    priority: Priority
    seq: int
    submitted_at: float
    feedback_period: int | None  # None: bounded, or never asks for feedback
    feedback_timeout: float
    state: TaskState = TaskState.RUNNABLE
    quanta: int = 0
    results: int = 0
    since_feedback: int = 0
    deadline: float | None = None
    deduct_carry: Fraction = Fraction(0)


class StrideScheduler(SchedulingPolicy):
    """Stride scheduling of recall tasks with priorities, deduction, steering and
    feedback deadlines (M 4.4). See the module docstring for the contract."""

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        clock: Clock | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        self.clock: Clock = clock or MonotonicClock()
        self._listeners: list[Listener] = [listener] if listener else []
        self._queues = {p: StrideQueue(self.config.stride1) for p in Priority}
        self._tasks: dict[str, _Task] = {}
        self._by_eid: dict[str, dict[str, None]] = {}  # eid -> task ids, in submission order
        self._orphans: set[str] = set()  # removed while a quantum was in flight
        self._suspended: dict[str, None] = {}  # tasks with a feedback deadline: what expire looks at
        self._running = dict.fromkeys(Priority, 0)
        self._seq = 0

    # -- listeners -----------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` for every event from now on."""
        self._listeners.append(listener)

    def _emit(self, event: SchedulerEvent) -> SchedulerEvent:
        for listener in self._listeners:
            listener(event)
        return event

    # -- submission ----------------------------------------------------------------
    def submit(
        self,
        eid: str,
        *,
        tickets: int | None = None,
        priority: Priority = Priority.QUERY,
        bounded: bool = False,
        feedback_period: int | None = None,
        feedback_timeout: float | None = None,
        task_id: str | None = None,
    ) -> str:
        """Add a runnable task for event ``eid`` and return its id.

        ``bounded`` tasks (an explicit time bound on the history they need) never
        suspend. Unbounded ones suspend every ``feedback_period`` chunks (default from
        the config; None there and here: never). ``task_id`` defaults to ``t<n>``.
        """
        cfg = self.config
        n = cfg.default_tickets if tickets is None else tickets
        check_tickets(n, subject=f"event {eid!r}", minimum=cfg.min_tickets, minimum_name="min_tickets")
        period = None if bounded else (feedback_period if feedback_period is not None else cfg.feedback_period)
        if period is not None and (isinstance(period, bool) or not isinstance(period, int) or period < 1):
            raise InvalidTaskSpec(f"event {eid!r}: feedback_period must be an integer >= 1, got {period!r}")
        timeout = cfg.feedback_timeout if feedback_timeout is None else float(feedback_timeout)
        if not timeout >= 0:
            raise InvalidTaskSpec(f"event {eid!r}: feedback_timeout must be >= 0, got {feedback_timeout!r}")
        if task_id is not None and (task_id in self._tasks or task_id in self._orphans):
            raise DuplicateTask(f"task id {task_id!r} is already in the scheduler")
        self._seq += 1
        tid = task_id
        if tid is None:
            while f"t{self._seq}" in self._tasks or f"t{self._seq}" in self._orphans:  # caller's ids
                self._seq += 1
            tid = f"t{self._seq}"
        prio = Priority(priority)
        task = _Task(tid, eid, prio, self._seq, self.clock.now(), period, timeout)
        self._tasks[tid] = task
        self._by_eid.setdefault(eid, {})[tid] = None
        q = self._queues[prio]
        q.join(tid, n, self._seq)
        self._emit(TaskSubmitted(tid, eid, prio, n, q.pass_of(tid), task.submitted_at))
        return tid

    # -- allocation ----------------------------------------------------------------
    def choose(self, load: float | None = None) -> QuantumGranted | None:
        """Grant one quantum to the next task, or return None if no task is runnable
        (or only materialization tasks are, and the background slots are full).

        QUERY tasks first. A MATERIALIZATION task is chosen when no query task is
        runnable, or when ``load`` (caller-reported, e.g. the busy fraction of the
        history-query slots) is below ``light_load`` and fewer than
        ``background_slots`` materialization quanta are in flight.
        """
        query = self._queues[Priority.QUERY].pick()
        mat = self._queues[Priority.MATERIALIZATION].pick()
        if mat is not None and query is not None:
            light = load is not None and load < self.config.light_load
            if not (light and self._running[Priority.MATERIALIZATION] < self.config.background_slots):
                mat = None
        tid = query if mat is None else mat
        if tid is None:
            return None
        task = self._tasks[tid]
        q = self._queues[task.priority]
        q.grant(tid)
        task.state = TaskState.RUNNING
        task.quanta += 1
        self._running[task.priority] += 1
        ev = QuantumGranted(tid, task.eid, task.priority, task.quanta, q.tickets(tid), q.pass_of(tid), self.clock.now())
        self._emit(ev)
        return ev

    def complete(self, task_id: str, *, results: int = 0, done: bool = False,
                 steps: int = 1) -> tuple[SchedulerEvent, ...]:
        """End the task's quantum in flight, having produced ``results`` rows over
        ``steps`` chunks (each counts towards the feedback period).

        Deducts ``tickets_per_result * results`` tickets (fractions carried over, never
        below ``min_tickets``). Then: ``done`` finishes the task (it leaves the
        scheduler); an unbounded task that has run its feedback period suspends;
        otherwise it is runnable again. A task cancelled or discarded while running is
        accepted and forgotten here (returns no events). Returns the events emitted.
        """
        if task_id in self._orphans:
            self._orphans.discard(task_id)
            return ()
        task = self._get(task_id)
        if task.state is not TaskState.RUNNING:
            raise TaskNotRunning(f"task {task_id!r} has no quantum in flight (state {task.state.value})")
        if isinstance(results, bool) or not isinstance(results, int) or results < 0:
            raise InvalidTaskSpec(f"task {task_id!r}: results must be an integer >= 0, got {results!r}")
        now = self.clock.now()
        q = self._queues[task.priority]
        self._running[task.priority] -= 1
        task.results += results
        task.since_feedback += max(1, int(steps))
        out: list[SchedulerEvent] = [self._emit(QuantumCompleted(task_id, task.eid, task.quanta, results, now))]
        if done:
            q.remove(task_id)
            self._forget(task)
            task.state = TaskState.FINISHED
            out.append(self._emit(TaskFinished(task_id, task.eid, task.quanta, task.results, now)))
            return tuple(out)
        old = q.tickets(task_id)
        task.deduct_carry += self.config.rate * results
        whole = floor(task.deduct_carry)
        task.deduct_carry -= whole
        new = max(self.config.min_tickets, old - whole)
        if new != old:
            q.modify(task_id, new)
            out.append(self._emit(TicketsChanged(task_id, task.eid, old, new, "results", now)))
        if task.feedback_period is not None and task.since_feedback >= task.feedback_period:
            q.release(task_id)
            q.leave(task_id)
            task.state = TaskState.SUSPENDED
            task.deadline = now + task.feedback_timeout
            self._suspended[task_id] = None
            out.append(self._emit(TaskSuspended(task_id, task.eid, task.quanta, task.deadline, now)))
        else:
            q.release(task_id)
            task.state = TaskState.RUNNABLE
        return tuple(out)

    # -- steering (M 4.4) ----------------------------------------------------------
    def steps_left(self, task_id: str) -> int | None:
        """Chunks the task may still read before it suspends for feedback (at least 1;
        None without a feedback period)."""
        task = self._get(task_id)
        if task.feedback_period is None:
            return None
        return max(1, task.feedback_period - task.since_feedback)

    def feedback(self, eid: str) -> tuple[str, ...]:
        """The user said "continue" for ``eid``: resume its suspended tasks and restart
        the feedback period of all its tasks. Returns the ids of the resumed tasks."""
        tasks = self._event_tasks(eid)
        now = self.clock.now()
        resumed = []
        for task in tasks:
            task.since_feedback = 0
            if task.state is TaskState.SUSPENDED:
                q = self._queues[task.priority]
                q.rejoin(task.task_id)
                task.state, task.deadline = TaskState.RUNNABLE, None
                self._suspended.pop(task.task_id, None)
                self._emit(TaskResumed(task.task_id, eid, q.pass_of(task.task_id), now))
                resumed.append(task.task_id)
        return tuple(resumed)

    def accelerate(self, eid: str, tickets: int) -> tuple[TicketsChanged, ...]:
        """Add ``tickets`` to every task of ``eid`` (rescaling their pass as Waldspurger's
        ``modify``). Counts as feedback: suspended tasks resume. Returns the changes."""
        check_tickets(tickets, subject=f"accelerate {eid!r}")
        tasks = self._event_tasks(eid)
        now = self.clock.now()
        changes = []
        for task in tasks:
            q = self._queues[task.priority]
            old = q.tickets(task.task_id)
            q.modify(task.task_id, old + tickets)
            ev = TicketsChanged(task.task_id, eid, old, old + tickets, "accelerate", now)
            changes.append(ev)
            self._emit(ev)
        self.feedback(eid)
        return tuple(changes)

    def cancel(self, eid: str) -> tuple[str, ...]:
        """Remove every task of ``eid``; returns their ids. Tasks with a quantum in flight
        are reported with ``was_running=True`` (their query should be cancelled); a later
        ``complete`` for them is accepted and ignored."""
        tasks = self._event_tasks(eid)
        now = self.clock.now()
        for task in tasks:
            running = self._drop(task)
            self._emit(TaskCancelled(task.task_id, eid, running, now))
        return tuple(t.task_id for t in tasks)

    # -- feedback deadlines --------------------------------------------------------
    def expire(self, now: float | None = None) -> tuple[TaskDiscarded, ...]:
        """Discard every task of each event with a suspended task whose feedback
        deadline has passed (``now >= deadline``). ``now`` defaults to the clock."""
        t = self.clock.now() if now is None else now
        late: dict[str, float] = {}
        # the suspended tasks only (not every open task), in submission order as before
        for task in sorted((self._tasks[tid] for tid in self._suspended), key=lambda x: x.seq):
            if task.deadline is not None and t >= task.deadline:
                late[task.eid] = min(task.deadline, late.get(task.eid, task.deadline))
        out = []
        for eid, deadline in late.items():
            for task in self._event_tasks(eid):
                running = self._drop(task)
                ev = TaskDiscarded(task.task_id, eid, deadline, running, t)
                self._emit(ev)
                out.append(ev)
        return tuple(out)

    def tick(self) -> tuple[TaskDiscarded, ...]:
        """``expire`` at the clock's current time."""
        return self.expire(self.clock.now())

    def next_deadline(self) -> float | None:
        """The earliest feedback deadline pending, for a caller that sleeps until it."""
        return min((d for d in (self._tasks[tid].deadline for tid in self._suspended) if d is not None),
                   default=None)

    # -- introspection -------------------------------------------------------------
    def tasks(self, eid: str | None = None) -> tuple[TaskInfo, ...]:
        """A snapshot of the tasks (of ``eid`` only, if given), in submission order."""
        chosen: Iterable[_Task] = self._tasks.values() if eid is None else self._event_tasks(eid)
        return tuple(self._info(t) for t in sorted(chosen, key=lambda t: t.seq))

    def task(self, task_id: str) -> TaskInfo:
        return self._info(self._get(task_id))

    def events(self) -> tuple[str, ...]:
        """Event ids that still have tasks, in order of their first submission."""
        return tuple(self._by_eid)

    def in_flight(self, priority: Priority | None = None) -> int:
        """Quanta granted and not yet completed (of one level, if given), orphans included."""
        if priority is not None:
            return self._running[priority]
        return sum(self._running.values()) + len(self._orphans)

    def global_pass(self, priority: Priority = Priority.QUERY) -> Fraction:
        return self._queues[priority].global_pass

    def __len__(self) -> int:
        return len(self._tasks)

    # -- internals -----------------------------------------------------------------
    def _get(self, task_id: str) -> _Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise UnknownTask(f"scheduler has no task {task_id!r}") from None

    def _event_tasks(self, eid: str) -> list[_Task]:
        ids = self._by_eid.get(eid)
        if not ids:
            raise UnknownEvent(f"scheduler has no task for event {eid!r}")
        return [self._tasks[tid] for tid in ids]

    def _info(self, t: _Task) -> TaskInfo:
        q = self._queues[t.priority]
        return TaskInfo(
            task_id=t.task_id,
            eid=t.eid,
            priority=t.priority,
            state=t.state,
            tickets=q.tickets(t.task_id),
            stride=q.stride(t.task_id),
            pass_=q.pass_of(t.task_id),
            quanta=t.quanta,
            results=t.results,
            submitted_at=t.submitted_at,
            deadline=t.deadline,
        )

    def _drop(self, task: _Task) -> bool:
        """Remove a task that did not finish; returns whether a quantum was in flight."""
        running = task.state is TaskState.RUNNING
        if running:
            self._running[task.priority] -= 1
            self._orphans.add(task.task_id)
        self._queues[task.priority].remove(task.task_id)
        self._forget(task)
        return running

    def _forget(self, task: _Task) -> None:
        del self._tasks[task.task_id]
        self._suspended.pop(task.task_id, None)
        ids = self._by_eid[task.eid]
        del ids[task.task_id]
        if not ids:
            del self._by_eid[task.eid]
