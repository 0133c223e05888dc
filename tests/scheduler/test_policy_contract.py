"""The scheduling-policy contract (:mod:`scheduler.abc`), run over every policy.

The stride scheduler (M 4.4) and the FIFO baseline differ only in *which* runnable task
they grant next; everything the Recall Manager relies on besides (running tasks are
never granted twice, priorities, feedback suspension and expiry, cancel of a running
task, ticket checks, unknown ids) is the same, and each test here runs over both.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    FifoScheduler,
    InvalidTickets,
    ManualClock,
    Priority,
    SchedulerConfig,
    SchedulingPolicy,
    StrideScheduler,
    TaskNotRunning,
    TaskState,
    TaskSuspended,
    UnknownEvent,
    UnknownTask,
)

POLICIES = {
    "stride": lambda clock: StrideScheduler(SchedulerConfig(tickets_per_result=0), clock=clock),
    "fifo": lambda clock: FifoScheduler(clock=clock),
}


@pytest.fixture(params=sorted(POLICIES))
def make_policy(request):
    """A factory ``clock -> policy`` for each policy."""
    return POLICIES[request.param]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture
def policy(make_policy, clock) -> SchedulingPolicy:
    return make_policy(clock)


def test_is_a_scheduling_policy_on_the_given_clock(policy, clock):
    assert isinstance(policy, SchedulingPolicy)
    assert policy.clock is clock
    assert len(policy) == 0 and policy.tasks() == () and policy.choose() is None


def test_submit_uses_the_given_id_and_generates_distinct_ones(policy):
    assert policy.submit("e", task_id="mine") == "mine"
    ids = {policy.submit("e") for _ in range(5)}
    assert len(ids) == 5 and "mine" not in ids
    assert len(policy) == 6
    assert {t.task_id for t in policy.tasks("e")} == ids | {"mine"}


def test_a_running_task_is_never_granted_again_before_complete(policy):
    a = policy.submit("e1")
    b = policy.submit("e2")
    g1, g2 = policy.choose(), policy.choose()
    assert {g1.task_id, g2.task_id} == {a, b}
    assert policy.choose() is None
    assert policy.in_flight() == 2
    assert policy.task(a).state is TaskState.RUNNING
    policy.complete(a, results=3)
    assert policy.in_flight() == 1
    assert policy.choose().task_id == a


def test_done_removes_the_task(policy):
    a = policy.submit("e")
    policy.choose()
    policy.complete(a, results=1, done=True)
    assert len(policy) == 0 and policy.choose() is None
    with pytest.raises(UnknownTask, match=repr(a)):
        policy.task(a)


def test_complete_without_a_quantum_is_refused(policy):
    a = policy.submit("e")
    with pytest.raises(TaskNotRunning, match=repr(a)):
        policy.complete(a)
    with pytest.raises(UnknownTask, match="'ghost'"):
        policy.complete("ghost")


def test_query_tasks_go_before_materialization_under_load(policy):
    m = policy.submit("mat", priority=Priority.MATERIALIZATION)
    q = policy.submit("query", priority=Priority.QUERY)
    assert policy.choose(load=1.0).task_id == q
    assert policy.choose(load=1.0).task_id == m  # no query task runnable: materialization runs


@pytest.mark.parametrize("resume", ["feedback", "accelerate"])
def test_feedback_suspends_and_resumes(policy, clock, resume):
    a = policy.submit("e", feedback_period=2, feedback_timeout=5)
    policy.choose()
    assert not any(isinstance(e, TaskSuspended) for e in policy.complete(a, results=1))
    policy.choose()
    assert any(isinstance(e, TaskSuspended) for e in policy.complete(a, results=1))
    assert policy.task(a).state is TaskState.SUSPENDED and policy.choose() is None
    assert policy.next_deadline() == clock.now() + 5
    if resume == "feedback":
        assert policy.feedback("e") == (a,)
    else:
        before = policy.task(a).tickets
        policy.accelerate("e", 7)
        assert policy.task(a).tickets == before + 7
    assert policy.next_deadline() is None
    assert policy.choose().task_id == a


def test_a_quantum_of_several_steps_counts_them_towards_the_feedback_period(policy):
    a = policy.submit("e", feedback_period=5, feedback_timeout=5)
    assert policy.steps_left(a) == 5
    policy.choose()
    assert not any(isinstance(e, TaskSuspended) for e in policy.complete(a, results=1, steps=3))
    assert policy.steps_left(a) == 2
    policy.choose()
    assert any(isinstance(e, TaskSuspended) for e in policy.complete(a, results=1, steps=2))
    policy.feedback("e")
    assert policy.steps_left(a) == 5  # feedback restarts the period
    assert policy.steps_left(policy.submit("f", bounded=True)) is None


def test_bounded_tasks_never_suspend(policy):
    a = policy.submit("e", bounded=True, feedback_period=1)
    for _ in range(3):
        policy.choose()
        assert not any(isinstance(e, TaskSuspended) for e in policy.complete(a, results=1))


def test_expire_discards_at_the_deadline_by_the_clock(policy, clock):
    a = policy.submit("e", feedback_period=1, feedback_timeout=5)
    other = policy.submit("f", bounded=True)
    policy.choose()
    policy.complete(a, results=0)
    clock.advance(4.999)
    assert policy.expire() == ()
    clock.advance(0.001)
    [gone] = policy.expire()
    assert gone.task_id == a and gone.eid == "e" and gone.was_running is False
    assert [t.task_id for t in policy.tasks()] == [other]


def test_cancel_of_a_running_task_accepts_its_late_complete(policy):
    a = policy.submit("e")
    b = policy.submit("e")
    running = policy.choose().task_id
    idle = b if running == a else a
    assert set(policy.cancel("e")) == {a, b}
    assert len(policy) == 0
    assert policy.complete(running, results=0) == ()  # accepted and forgotten
    with pytest.raises(UnknownTask, match=repr(idle)):
        policy.complete(idle)
    assert policy.in_flight() == 0
    with pytest.raises(UnknownEvent, match="'e'"):
        policy.cancel("e")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_bad_tickets_are_refused_naming_event_and_value(policy, bad):
    with pytest.raises(InvalidTickets, match=f"'e'.*{bad!r}"):
        policy.submit("e", tickets=bad)
    assert len(policy) == 0


def test_steering_an_unknown_event_is_refused(policy):
    for call in (policy.cancel, policy.feedback, lambda e: policy.accelerate(e, 3)):
        with pytest.raises(UnknownEvent, match="'ghost'"):
            call("ghost")


@settings(max_examples=25, deadline=None)
@given(chunks=st.lists(st.integers(1, 6), min_size=1, max_size=6), slots=st.integers(1, 3),
       name=st.sampled_from(sorted(POLICIES)))
def test_every_task_gets_exactly_its_quanta(chunks, slots, name):
    """Drained with up to ``slots`` quanta in flight, each task is granted once per chunk
    and never while running; the policy ends empty."""
    policy = POLICIES[name](ManualClock())
    left = {policy.submit(f"e{i}", bounded=True): n for i, n in enumerate(chunks)}
    granted = dict.fromkeys(left, 0)
    running: list[str] = []
    while left:
        while len(running) < slots and (g := policy.choose()) is not None:
            assert g.task_id not in running
            running.append(g.task_id)
            granted[g.task_id] += 1
        tid = running.pop(0)
        left[tid] -= 1
        policy.complete(tid, results=1, done=left[tid] == 0)
        if left[tid] == 0:
            del left[tid]
    assert granted == {tid: n for tid, n in zip(granted, chunks, strict=True)}
    assert len(policy) == 0 and policy.in_flight() == 0
