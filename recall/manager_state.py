"""The Recall Manager's shared bookkeeping and the ending of tasks (M 4.4, 4.6).

The manager is built by composition: :class:`recall.manager.RecallManager` owns one
:class:`ManagerState` (the lock and the task and event tables), one
:class:`OutputPublisher` (sinks and the bus) and one :class:`TaskLifecycle` (how a
task ends and when an event's boundary is published), and hands them to its
collaborators, the worker pool (:mod:`recall.manager_worker`) and the steering
(:mod:`recall.manager_steer`). Every table of :class:`ManagerState` is read and written
only under its ``cond``.

Boundary rule (M 4.6: "the Recall Manager produces the boundary tuples"): once every
task of an event has ended and no ``submit`` is still adding tasks to it, exactly one
``BOUNDARY`` output is published for the event. Its ``seq`` follows every output of the
event; its ``operator`` is the event's operators joined by ``,``; its row says how each
task ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from recall.api import EndReason, Output, OutputKind
from recall.outputs import Bus
from recall.replica2 import HistoryListener, SearchProgress
from recall.task import RecallTask, TaskStatus, TaskView
from scheduler.abc import SchedulingPolicy
from scheduler.clock import Clock

log = logging.getLogger("recall.manager")

OutputSink = Callable[[Output], None]


@dataclass
class EventRecord:
    """One open event: its tasks (task id -> task while open, None once ended), how
    each ended, its operators and the highest ``seq`` published so far."""

    eid: str
    event_ts: Any
    tasks: dict[str, RecallTask | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    operators: dict[str, None] = field(default_factory=dict)
    max_seq: int = -1
    closed: bool = False
    pending: int = 0  # tasks of an ongoing submit() call not yet registered


class ManagerState:
    """The state the manager's collaborators share, guarded by ``cond``: open tasks,
    open events, statistics of ended tasks, and whether the manager is closing. The
    scheduling policy is not thread-safe and is only called under ``cond`` too."""

    def __init__(self, scheduler: SchedulingPolicy, clock: Clock) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.cond = threading.Condition(threading.RLock())
        self.tasks: dict[str, RecallTask] = {}
        self.events: dict[str, EventRecord] = {}
        self.finished: dict[str, TaskView] = {}
        self.closing = False

    def open_event(self, eid: str, event_ts: Any) -> EventRecord:
        """Under the lock: the event's open record, a new one if it has none or its
        last round is closed (a task for a closed event opens a new round)."""
        ev = self.events.get(eid)
        if ev is None or ev.closed:
            ev = self.events[eid] = EventRecord(eid, event_ts)
        return ev

    def is_open(self, eid: str) -> bool:
        """Under the lock: whether ``eid`` has an open record."""
        ev = self.events.get(eid)
        return ev is not None and not ev.closed


class OutputPublisher:
    """Hands every output to the sinks (a failing sink is counted and logged, never
    raised) and then to the bus."""

    def __init__(self, sinks: OutputSink | Iterable[OutputSink] | None, bus: Bus, clock: Clock) -> None:
        if sinks is None:
            self.sinks: list[OutputSink] = []
        elif callable(sinks):
            self.sinks = [sinks]
        else:
            self.sinks = list(sinks)
        self.bus = bus
        self.clock = clock
        self.sink_errors = 0

    def add_sink(self, sink: OutputSink) -> None:
        self.sinks = [*self.sinks, sink]

    def emit(self, task: RecallTask, outputs: list[Output]) -> None:
        """Publish a task's outputs and count them in its statistics."""
        if not outputs:
            return
        if task.first_result_at is None:
            task.first_result_at = self.clock.now()
        task.outputs += len(outputs)
        for o in outputs:
            if o.seq > task.max_seq:
                task.max_seq = o.seq
            self.publish(o)

    def publish(self, output: Output) -> None:
        for sink in self.sinks:
            try:
                sink(output)
            except Exception:
                self.sink_errors += 1
                log.exception("a recall output sink failed on %s/%s", output.operator, output.eid)
        self.bus.publish(output)


class TaskLifecycle:
    """Ends tasks and closes events (the boundary rule of the module docstring)."""

    def __init__(self, state: ManagerState, publisher: OutputPublisher) -> None:
        self.state = state
        self.publisher = publisher

    def end(self, task: RecallTask, reason: EndReason) -> None:
        """Finish a task whose scheduler entry is already gone; called by exactly one
        thread per task (the worker, or the thread that took it from the scheduler)."""
        outputs: list[Output] = []
        op = task.description.recall_operator
        try:
            if reason is not EndReason.CANCELLED and task.history_remaining is not None \
                    and isinstance(op, HistoryListener):  # how far replica2 searched (recall.replica2)
                outputs = list(op.on_history(task.state, SearchProgress(
                    task.searched_back_to, task.materialized_until, task.remaining, task.reprocessed)))
            outputs += list(op.on_end(task.state, reason))
        except Exception as exc:
            msg = f"operator {task.spec.operator!r} failed in on_end({reason.value}): {type(exc).__name__}: {exc}"
            task.error = f"{task.error}; {msg}" if task.error else msg
            log.warning("recall task %s: %s", task.task_id, msg)
        if reason is not EndReason.CANCELLED or outputs:
            self.publisher.emit(task, outputs)
        st = self.state
        with st.cond:
            task.end_reason = reason
            task.status = TaskStatus.ended(reason)
            task.ended_at = st.clock.now()
            task.description.ended += 1
            if reason is not EndReason.CANCELLED:  # cancelled tasks leave nothing behind
                st.finished[task.task_id] = task.view(None)
            del st.tasks[task.task_id]
            ev = st.events[task.spec.eid]
            ev.tasks[task.task_id] = None
            ev.reasons[task.task_id] = reason.value
            ev.max_seq = max(ev.max_seq, task.max_seq)
            boundary = self.close_if_done(ev)
            task.state = None  # the operator's state is released with the task
            st.cond.notify_all()
        if boundary is not None:
            self.publish_boundary(ev, boundary)

    def close_if_done(self, ev: EventRecord) -> Output | None:
        """Under the lock: the event's boundary, if every task has ended and no submit()
        is still adding tasks to it (M 4.6: once all of the event's tasks have ended)."""
        if ev.closed or ev.pending or not ev.tasks or not all(t is None for t in ev.tasks.values()):
            return None
        ev.closed = True
        return Output(operator=",".join(sorted(ev.operators)), eid=ev.eid, event_ts=ev.event_ts,
                      kind=OutputKind.BOUNDARY, seq=ev.max_seq + 1, key="",
                      row={"tasks": len(ev.tasks), "ended": dict(ev.reasons)}, covered=None)

    def publish_boundary(self, ev: EventRecord, boundary: Output) -> None:
        self.publisher.publish(boundary)
        st = self.state
        with st.cond:
            if st.events.get(ev.eid) is ev:
                del st.events[ev.eid]
            st.cond.notify_all()

    def boundary_done(self, task: RecallTask) -> bool:
        """Under the lock: whether the boundary of ``task``'s event is out (a closed
        event record still present means its boundary is being published)."""
        ev = self.state.events.get(task.spec.eid)
        return ev is None or not ev.closed
