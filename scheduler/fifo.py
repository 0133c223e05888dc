"""A first-come-first-served :class:`~scheduler.abc.SchedulingPolicy` (a baseline).

This policy always grants the next quantum to the oldest runnable task, so the
first tasks submitted run all their chunks before later ones get any: the naive
"process recall tasks in arrival order" the fairness benchmark compares stride
scheduling against (M 4.4). Tickets are recorded but never consulted; priorities,
feedback suspensions and deadlines behave as in the stride scheduler.

>>> from scheduler.clock import ManualClock
>>> f = FifoScheduler(clock=ManualClock())
>>> a = f.submit("e1"); b = f.submit("e2")
>>> picks = []
>>> for _ in range(3):
...     g = f.choose(); _ = f.complete(g.task_id, results=5); picks.append(g.eid)
>>> picks
['e1', 'e1', 'e1']
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from scheduler.abc import SchedulingPolicy
from scheduler.clock import Clock, MonotonicClock
from scheduler.errors import TaskNotRunning, UnknownEvent, UnknownTask
from scheduler.events import (
    QuantumGranted,
    SchedulerEvent,
    TaskDiscarded,
    TaskFinished,
    TaskSuspended,
)
from scheduler.model import Priority, TaskInfo, TaskState
from scheduler.tickets import check_tickets


@dataclass(slots=True)
class _Fifo:
    task_id: str
    eid: str
    priority: Priority
    seq: int
    tickets: int
    submitted_at: float
    feedback_period: int | None
    feedback_timeout: float
    state: TaskState = TaskState.RUNNABLE
    quanta: int = 0
    results: int = 0
    since_feedback: int = 0
    deadline: float | None = None


class FifoScheduler(SchedulingPolicy):
    """Oldest runnable task first (QUERY before MATERIALIZATION). Not thread-safe: the
    caller serialises calls, as with the stride scheduler."""

    def __init__(self, *, clock: Clock | None = None, feedback_timeout: float = 300.0) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self.feedback_timeout = feedback_timeout
        self._tasks: dict[str, _Fifo] = {}  # insertion order is arrival order
        self._orphans: set[str] = set()
        self._seq = 0

    def submit(self, eid: str, *, tickets: int | None = None, priority: Priority = Priority.QUERY,
               bounded: bool = False, feedback_period: int | None = None,
               feedback_timeout: float | None = None, task_id: str | None = None) -> str:
        n = 100 if tickets is None else tickets
        check_tickets(n, subject=f"event {eid!r}")
        self._seq += 1
        tid = task_id if task_id is not None else f"t{self._seq}"
        timeout = self.feedback_timeout if feedback_timeout is None else float(feedback_timeout)
        self._tasks[tid] = _Fifo(tid, eid, Priority(priority), self._seq, n, self.clock.now(),
                                 None if bounded else feedback_period, timeout)
        return tid

    def choose(self, load: float | None = None) -> QuantumGranted | None:
        best: _Fifo | None = None
        for t in self._tasks.values():
            if t.state is TaskState.RUNNABLE and (best is None or t.priority < best.priority):
                best = t
                if t.priority is Priority.QUERY:
                    break
        if best is None:
            return None
        best.state = TaskState.RUNNING
        best.quanta += 1
        return QuantumGranted(best.task_id, best.eid, best.priority, best.quanta, best.tickets,
                              Fraction(best.seq), self.clock.now())

    def complete(self, task_id: str, *, results: int = 0, done: bool = False,
                 steps: int = 1) -> tuple[SchedulerEvent, ...]:
        if task_id in self._orphans:
            self._orphans.discard(task_id)
            return ()
        t = self._get(task_id)
        if t.state is not TaskState.RUNNING:
            raise TaskNotRunning(f"task {task_id!r} has no quantum in flight (state {t.state.value})")
        now = self.clock.now()
        t.results += results
        t.since_feedback += max(1, int(steps))
        if done:
            del self._tasks[task_id]
            return (TaskFinished(task_id, t.eid, t.quanta, t.results, now),)
        if t.feedback_period is not None and t.since_feedback >= t.feedback_period:
            t.state, t.deadline = TaskState.SUSPENDED, now + t.feedback_timeout
            return (TaskSuspended(task_id, t.eid, t.quanta, t.deadline, now),)
        t.state = TaskState.RUNNABLE
        return ()

    def steps_left(self, task_id: str) -> int | None:
        t = self._get(task_id)
        return None if t.feedback_period is None else max(1, t.feedback_period - t.since_feedback)

    def feedback(self, eid: str) -> tuple[str, ...]:
        resumed = []
        for t in self._event(eid):
            t.since_feedback = 0
            if t.state is TaskState.SUSPENDED:
                t.state, t.deadline = TaskState.RUNNABLE, None
                resumed.append(t.task_id)
        return tuple(resumed)

    def accelerate(self, eid: str, tickets: int) -> tuple:
        for t in self._event(eid):
            t.tickets += tickets
        self.feedback(eid)
        return ()

    def cancel(self, eid: str) -> tuple[str, ...]:
        return tuple(self._drop(t) for t in self._event(eid))

    def expire(self, now: float | None = None) -> tuple[TaskDiscarded, ...]:
        at = self.clock.now() if now is None else now
        late = {t.eid: t.deadline for t in self._tasks.values() if t.deadline is not None and at >= t.deadline}
        out = []
        for eid, deadline in late.items():
            for t in self._event(eid):
                running = t.state is TaskState.RUNNING
                self._drop(t)
                out.append(TaskDiscarded(t.task_id, eid, deadline or at, running, at))
        return tuple(out)

    def next_deadline(self) -> float | None:
        return min((t.deadline for t in self._tasks.values() if t.deadline is not None), default=None)

    def task(self, task_id: str) -> TaskInfo:
        t = self._get(task_id)
        return TaskInfo(t.task_id, t.eid, t.priority, t.state, t.tickets, Fraction(1, t.tickets),
                        Fraction(t.seq), t.quanta, t.results, t.submitted_at, t.deadline)

    def tasks(self, eid: str | None = None) -> tuple[TaskInfo, ...]:
        return tuple(self.task(t.task_id) for t in self._tasks.values() if eid is None or t.eid == eid)

    def in_flight(self, priority: Priority | None = None) -> int:
        return sum(1 for t in self._tasks.values() if t.state is TaskState.RUNNING
                   and (priority is None or t.priority is priority)) + (len(self._orphans) if priority is None else 0)

    def __len__(self) -> int:
        return len(self._tasks)

    def _get(self, task_id: str) -> _Fifo:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise UnknownTask(f"scheduler has no task {task_id!r}") from None

    def _event(self, eid: str) -> list[_Fifo]:
        tasks = [t for t in self._tasks.values() if t.eid == eid]
        if not tasks:
            raise UnknownEvent(f"scheduler has no task for event {eid!r}")
        return tasks

    def _drop(self, t: _Fifo) -> str:
        if t.state is TaskState.RUNNING:
            self._orphans.add(t.task_id)
        del self._tasks[t.task_id]
        return t.task_id
