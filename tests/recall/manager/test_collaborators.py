"""The Recall Manager's collaborators on their own, without a database or threads: the
shared state, the output publisher and the task lifecycle (the boundary rule, M 4.6)."""

from __future__ import annotations

from datetime import UTC, datetime

from archive.abc import HistoryQuery
from recall.api import EndReason, Output, OutputKind, TaskSpec
from recall.manager_state import ManagerState, OutputPublisher, TaskLifecycle
from recall.outputs import Bus
from recall.task import RecallTask, TaskDescription, TaskStatus
from scheduler import FifoScheduler, ManualClock

TS = datetime(2026, 3, 1, tzinfo=UTC)


class _Op:
    """An operator whose ``on_end`` answers one row (or raises, if told to)."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail = name, fail

    def on_end(self, state, reason):
        if self.fail:
            raise RuntimeError("boom")
        return [Output(self.name, "e1", TS, OutputKind.INSERT, 5, "k", {"end": reason.value}, None)]


def _setup(*ops):
    clock = ManualClock(10.0)
    state = ManagerState(FifoScheduler(clock=clock), clock)
    seen: list[Output] = []
    publisher = OutputPublisher([seen.append, lambda o: 1 / 0], Bus(), clock)
    life = TaskLifecycle(state, publisher)
    tasks = []
    for i, op in enumerate(ops):
        spec = TaskSpec(op.name, "e1", TS, HistoryQuery("SELECT 1", ("m",), ()), {})
        task = RecallTask(f"r{i + 1}", spec, TaskDescription(op.name, op, 0.0), [1], clock.now())
        with state.cond:
            ev = state.open_event("e1", TS)
            ev.tasks[task.task_id] = task
            ev.operators[op.name] = None
            state.tasks[task.task_id] = task
        tasks.append(task)
    return state, publisher, life, tasks, seen


def test_one_boundary_after_the_last_task_of_the_event_ends():
    state, publisher, life, (a, b), seen = _setup(_Op("x"), _Op("y", fail=True))
    life.end(a, EndReason.DONE)
    assert [o.kind for o in seen] == [OutputKind.INSERT]  # b is still open: no boundary yet
    life.end(b, EndReason.DONE)
    boundary = seen[-1]
    assert boundary.kind is OutputKind.BOUNDARY and boundary.operator == "x,y"
    assert boundary.seq == 6 and boundary.row == {"tasks": 2, "ended": {"r1": "done", "r2": "done"}}
    assert "boom" in b.error and a.status is TaskStatus.DONE
    assert state.events == {} and state.tasks == {} and set(state.finished) == {"r1", "r2"}
    assert publisher.sink_errors == 2  # the failing sink, once per output; never raised


def test_cancelled_tasks_leave_no_statistics_behind():
    state, _, life, (a,), seen = _setup(_Op("x"))
    life.end(a, EndReason.CANCELLED)
    assert state.finished == {} and seen[-1].row["ended"] == {"r1": "cancelled"}


def test_a_task_for_a_closed_event_opens_a_new_round():
    state = ManagerState(FifoScheduler(clock=ManualClock()), ManualClock())
    first = state.open_event("e", TS)
    assert state.open_event("e", TS) is first and state.is_open("e")
    first.closed = True
    assert not state.is_open("e") and state.open_event("e", TS) is not first
