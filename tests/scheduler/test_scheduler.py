"""The recall-task scheduler's contract (M 4.4): priorities, deduction with a floor,
cancel / accelerate at the next choice, feedback deadlines, running tasks, errors."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from scheduler import (
    DuplicateTask,
    InvalidTaskSpec,
    InvalidTickets,
    ManualClock,
    Priority,
    QuantumGranted,
    SchedulerConfig,
    SchedulerError,
    StrideScheduler,
    TaskCancelled,
    TaskDiscarded,
    TaskNotRunning,
    TaskState,
    TaskSuspended,
    TicketsChanged,
    UnknownEvent,
    UnknownTask,
    event_dict,
)
from tests.scheduler.stride_sim import run_sequential


def make(**cfg) -> tuple[StrideScheduler, ManualClock, list]:
    clock = ManualClock(100.0)
    seen: list = []
    cfg.setdefault("tickets_per_result", 0)
    return StrideScheduler(SchedulerConfig(**cfg), clock=clock, listener=seen.append), clock, seen


# -- choosing ---------------------------------------------------------------------------


def test_ties_go_to_the_earlier_submission():
    s, _, _ = make()
    ids = [s.submit(f"e{i}", tickets=10) for i in range(5)]
    assert run_sequential(s, 10) == ids + ids


def test_a_running_task_is_not_chosen_again_until_completed():
    s, _, _ = make()
    a = s.submit("e1")
    b = s.submit("e2")
    g1, g2 = s.choose(), s.choose()
    assert {g1.task_id, g2.task_id} == {a, b}
    assert s.choose() is None  # both in flight
    assert s.in_flight() == 2
    assert s.task(a).state is TaskState.RUNNING
    s.complete(a)
    g3 = s.choose()
    assert g3.task_id == a and g3.quantum == 2
    assert s.choose() is None


def test_shares_follow_tickets_exactly():
    s, _, _ = make()
    a, b, c = (s.submit(f"e{i}", tickets=t) for i, t in enumerate([3, 2, 1]))
    trace = run_sequential(s, 600)
    assert [trace.count(x) for x in (a, b, c)] == [300, 200, 100]


def test_a_low_ticket_newcomer_gets_its_first_quantum_at_once():
    # Waldspurger's join alone would start it one full stride (1 ticket: S) after the
    # global pass, i.e. after about 200 quanta of the heavy tasks (M 4.4 wants every task
    # to get some history quickly)
    s, _, _ = make()
    heavy = [s.submit(f"h{i}", tickets=100) for i in range(2)]
    run_sequential(s, 51)
    light = s.submit("light", tickets=1)
    assert light in run_sequential(s, 2)
    # and then waits its stride: about 200 quanta before its second
    nxt = run_sequential(s, 250)
    assert nxt.index(light) >= 190 and nxt.count(light) == 1
    assert set(nxt) == {light, *heavy}


@pytest.mark.parametrize("n", [10, 1000])
def test_a_newcomer_is_the_next_grant_however_many_tasks_share_the_lowest_pass(n):
    # tasks submitted together with equal tickets move in lockstep: after one quantum
    # each, most of them share the lowest pass, where a newcomer's join is clamped; it
    # must not wait behind all of them (M 4.4: a new task gets the database at once)
    s, _, _ = make(tickets_per_result=Fraction(1, 10))
    old = [s.submit(f"bg{i}", tickets=100) for i in range(n)]
    flying = [s.choose().task_id for _ in range(4)]  # 4 quanta in flight, as the manager's workers
    for _ in range(n + n // 2):  # everyone's first quantum, then half of them a second
        done = flying.pop(0)
        s.complete(done, results=1)
        flying.append(s.choose().task_id)
    for fresh in range(3):
        new = s.submit(f"fresh{fresh}", tickets=100)
        s.complete(flying.pop(0), results=1)
        assert s.choose().task_id == new
        flying.append(new)
    # and the old tasks keep their stride order: no one of them gets two more quanta
    # before every other got one more
    trace = []
    for _ in range(2 * n):
        done = flying.pop(0)
        s.complete(done, results=1)
        g = s.choose()
        trace.append(g.task_id)
        flying.append(g.task_id)
    assert set(old) <= set(trace)


# -- priorities -------------------------------------------------------------------------


def test_query_tasks_run_before_materialization():
    s, _, _ = make()
    m = s.submit("mat", priority=Priority.MATERIALIZATION, tickets=1000)
    q = s.submit("q", tickets=1)
    assert run_sequential(s, 3, load=None) == [q, q, q]
    assert run_sequential(s, 3, load=0.9) == [q, q, q]  # busy: still queries only
    s.cancel("q")
    assert run_sequential(s, 2) == [m, m]  # no query runnable: materialization runs


def test_materialization_uses_a_background_slot_under_light_load():
    s, _, _ = make(light_load=0.5, background_slots=1)
    m1 = s.submit("m1", priority=Priority.MATERIALIZATION)
    s.submit("m2", priority=Priority.MATERIALIZATION)
    m2 = s.task("t2").task_id
    q1, q2 = s.submit("q1"), s.submit("q2")
    g = s.choose(load=0.2)
    assert g.task_id == m1 and g.priority is Priority.MATERIALIZATION
    # the one background slot is taken: queries get the next slots, even under light load
    assert s.choose(load=0.2).task_id == q1
    assert s.choose(load=0.2).task_id == q2
    assert s.in_flight(Priority.MATERIALIZATION) == 1
    # no query runnable any more: materialization may run whatever the load
    assert s.choose(load=0.99).task_id == m2


def test_load_exactly_at_threshold_is_not_light():
    s, _, _ = make(light_load=0.5)
    s.submit("m", priority=Priority.MATERIALIZATION)
    q = s.submit("q")
    assert s.choose(load=0.5).task_id == q


# -- ticket deduction (M 4.4) -----------------------------------------------------------


def test_tickets_deducted_in_proportion_to_results_with_carry_and_floor():
    s, _, seen = make(tickets_per_result=Fraction(1, 4), min_tickets=5)
    t = s.submit("e", tickets=10)
    s.choose()
    s.complete(t, results=3)  # 3/4 of a ticket: carried, nothing removed yet
    assert s.task(t).tickets == 10
    s.choose()
    s.complete(t, results=5)  # carry 3/4 + 5/4 = 2 tickets
    assert s.task(t).tickets == 8
    s.choose()
    s.complete(t, results=400)  # would go to -92: stops at the floor
    assert s.task(t).tickets == 5
    assert s.task(t).stride == Fraction(1 << 20, 5)
    changes = [e for e in seen if isinstance(e, TicketsChanged)]
    assert [(e.old, e.new, e.reason) for e in changes] == [(10, 8, "results"), (8, 5, "results")]


def test_tasks_with_few_results_are_scheduled_more_often():
    s, _, _ = make(tickets_per_result=1, min_tickets=1)
    busy = s.submit("busy", tickets=100)
    quiet = s.submit("quiet", tickets=100)
    trace = run_sequential(s, 200, results=lambda tid: 20 if tid == busy else 0)
    assert s.task(busy).tickets == 1
    assert trace.count(quiet) > 5 * trace.count(busy)


def test_deduction_moves_the_pass_like_waldspurgers_modify():
    s, _, _ = make(tickets_per_result=1)
    t = s.submit("e", tickets=8)
    s.submit("other", tickets=8)
    s.choose()  # t: pass base + 2 strides, global pass advanced by one global stride
    g = s.global_pass()
    g_int = Fraction(int(g))
    before = s.task(t).pass_
    s.complete(t, results=4)  # 8 -> 4 tickets: stride doubles, so does the remain
    assert s.task(t).pass_ == g_int + (before - g_int) * 2


# -- steering (M 4.4) -------------------------------------------------------------------


def test_cancel_takes_effect_at_the_next_choice_and_frees_everything():
    s, _, seen = make()
    a1 = s.submit("a", tickets=10)
    b = s.submit("b", tickets=10)
    a2 = s.submit("a", tickets=10)
    running = s.choose()
    assert running.task_id == a1
    assert s.cancel("a") == (a1, a2)
    cancelled = [e for e in seen if isinstance(e, TaskCancelled)]
    assert [(e.task_id, e.was_running) for e in cancelled] == [(a1, True), (a2, False)]
    assert s.choose().task_id == b
    assert [t.task_id for t in s.tasks()] == [b]
    assert s.events() == ("b",)
    # the in-flight quantum of a cancelled task is accepted and forgotten
    assert s.in_flight() == 2
    assert s.complete(a1, results=7) == ()
    assert s.in_flight() == 1
    with pytest.raises(UnknownTask, match=repr(a1)):
        s.complete(a1)
    s.complete(b, done=True)
    assert len(s) == 0 and s.events() == () and s.in_flight() == 0


def test_accelerate_takes_effect_at_the_next_choice():
    s, _, seen = make()
    a = s.submit("a", tickets=10)
    b = s.submit("b", tickets=10)
    run_sequential(s, 2)  # a, b once each: tied again, a would go next
    changes = s.accelerate("b", 90)
    assert [(c.task_id, c.old, c.new, c.reason) for c in changes] == [(b, 10, 100, "accelerate")]
    assert s.choose().task_id == b
    assert s.task(b).tickets == 100 and s.task(a).tickets == 10
    assert changes[0] in seen


def test_accelerate_applies_to_every_task_of_the_event():
    s, _, _ = make()
    ids = [s.submit("hot", tickets=5) for _ in range(3)]
    s.submit("cold", tickets=5)
    s.accelerate("hot", 7)
    assert [s.task(t).tickets for t in ids] == [12, 12, 12]


# -- feedback deadlines (M 4.4) ---------------------------------------------------------


def _suspend_after_two(s: StrideScheduler, clock: ManualClock):
    t = s.submit("ev", feedback_period=2, feedback_timeout=10.0)
    other = s.submit("ev", bounded=True)  # same event, bounded: never suspends
    keep = s.submit("keep", feedback_period=2, feedback_timeout=1000.0)
    order = run_sequential(s, 2)
    assert order == [t, other]
    s.choose()  # keep
    s.choose()  # t again: its 2nd quantum
    clock.set(105.0)
    events = s.complete(t)
    suspended = [e for e in events if isinstance(e, TaskSuspended)]
    assert suspended and suspended[0].deadline == 115.0
    return t, other, keep


def test_unbounded_task_suspends_every_feedback_period():
    s, clock, _ = make()
    t, other, keep = _suspend_after_two(s, clock)
    info = s.task(t)
    assert info.state is TaskState.SUSPENDED and info.deadline == 115.0
    assert s.next_deadline() == 115.0
    # a suspended task is not chosen
    picks = [s.choose().task_id]
    s.complete(picks[0])
    assert t not in picks


def test_feedback_deadline_discards_exactly_at_the_boundary_not_one_tick_before():
    s, clock, seen = make()
    t, other, keep = _suspend_after_two(s, clock)
    g = s.choose()  # `other` (same event) is now running
    assert g.task_id == other
    clock.set(115.0 - 1e-9)
    assert s.tick() == ()
    assert s.task(t).state is TaskState.SUSPENDED
    clock.set(115.0)
    dropped = s.tick()
    assert [(d.task_id, d.was_running, d.deadline) for d in dropped] == [(t, False, 115.0), (other, True, 115.0)]
    assert all(isinstance(d, TaskDiscarded) and d.eid == "ev" for d in dropped)
    assert [x.task_id for x in s.tasks()] == [keep]
    assert s.complete(other) == ()  # its query was in flight
    assert set(dropped) <= set(seen)


def test_expire_takes_an_explicit_now():
    s, clock, _ = make()
    t, _, _ = _suspend_after_two(s, clock)
    assert s.expire(114.0) == ()
    assert {d.task_id for d in s.expire(200.0)} >= {t}


def test_feedback_resumes_and_restarts_the_period():
    s, clock, _ = make()
    t, other, keep = _suspend_after_two(s, clock)
    assert s.feedback("ev") == (t,)
    info = s.task(t)
    assert info.state is TaskState.RUNNABLE and info.deadline is None
    clock.set(500.0)
    assert s.tick() == ()  # no deadline pending for ev any more
    # it suspends again only after two more of its own quanta
    mine = 0
    while mine < 2:
        g = s.choose()
        ev = s.complete(g.task_id)
        if g.task_id == t:
            mine += 1
            assert any(isinstance(e, TaskSuspended) for e in ev) == (mine == 2)


def test_accelerate_counts_as_feedback():
    s, clock, _ = make()
    t, _, _ = _suspend_after_two(s, clock)
    s.accelerate("ev", 10)
    assert s.task(t).state is TaskState.RUNNABLE
    clock.set(1000.0)
    assert s.tick() == ()
    assert s.task(t).tickets == 110


def test_rejoin_after_suspension_keeps_the_remain():
    s, clock, _ = make()
    t = s.submit("ev", feedback_period=1, feedback_timeout=60.0)
    s.submit("x")
    s.submit("y")
    g = s.choose()
    assert g.task_id == t
    s.complete(t)
    remain = s.task(t).pass_ - int(s.global_pass())
    run_sequential(s, 6)
    s.feedback("ev")
    assert s.task(t).pass_ - int(s.global_pass()) == remain


# -- errors, events, snapshots ----------------------------------------------------------


def test_errors_name_the_offending_id():
    s, _, _ = make()
    t = s.submit("e1", task_id="job-1")
    with pytest.raises(UnknownTask, match="'nope'"):
        s.complete("nope")
    with pytest.raises(UnknownTask, match="'nope'"):
        s.task("nope")
    with pytest.raises(TaskNotRunning, match="'job-1'"):
        s.complete(t)
    for call in (s.cancel, s.feedback, lambda e: s.accelerate(e, 3)):
        with pytest.raises(UnknownEvent, match="'ghost'"):
            call("ghost")
    with pytest.raises(DuplicateTask, match="'job-1'"):
        s.submit("e2", task_id="job-1")
    with pytest.raises(InvalidTickets, match="0"):
        s.submit("e3", tickets=0)
    with pytest.raises(InvalidTickets, match="'e1'"):
        s.accelerate("e1", -2)
    assert issubclass(UnknownEvent, LookupError) and issubclass(UnknownEvent, SchedulerError)


def test_bad_task_arguments_are_named():
    s, _, _ = make()
    with pytest.raises(InvalidTaskSpec, match="'e'.*feedback_period.*0"):
        s.submit("e", feedback_period=0)
    with pytest.raises(InvalidTaskSpec, match="'e'.*feedback_timeout"):
        s.submit("e", feedback_timeout=-1)
    t = s.submit("e")
    s.choose()
    with pytest.raises(InvalidTaskSpec, match=f"{t!r}.*-3"):
        s.complete(t, results=-3)
    assert s.task(t).state is TaskState.RUNNING  # a refused call changes nothing


def test_generated_ids_skip_ids_the_caller_chose():
    s, _, _ = make()
    s.submit("e", task_id="t2")
    assert s.submit("e") == "t3"
    assert len({s.submit("e") for _ in range(5)} | {"t2", "t3"}) == 7


def test_submit_below_the_floor_is_refused():
    s, _, _ = make(min_tickets=10)
    with pytest.raises(InvalidTickets, match="min_tickets=10"):
        s.submit("e", tickets=9)


def test_events_are_reported_in_order_and_serialise():
    s, clock, seen = make(tickets_per_result=1)
    t = s.submit("e", tickets=50, feedback_period=1, feedback_timeout=5.0)
    g = s.choose()
    assert isinstance(g, QuantumGranted) and g in seen
    s.complete(t, results=3)
    s.feedback("e")
    s.choose()
    s.complete(t, done=True)
    kinds = [e.kind for e in seen]
    assert kinds == [
        "task_submitted",
        "quantum_granted",
        "quantum_completed",
        "tickets_changed",
        "task_suspended",
        "task_resumed",
        "quantum_granted",
        "quantum_completed",
        "task_finished",
    ]
    payload = json.dumps([event_dict(e) for e in seen])
    assert '"kind": "task_finished"' in payload
    assert seen[-1].results == 3 and seen[-1].quanta == 2


def test_snapshot_lists_every_task_with_its_state():
    s, _, _ = make()
    a = s.submit("e1", tickets=4)
    b = s.submit("e2", tickets=2, priority=Priority.MATERIALIZATION)
    s.choose()
    snap = s.tasks()
    assert [(x.task_id, x.eid, x.priority, x.state, x.tickets, x.quanta) for x in snap] == [
        (a, "e1", Priority.QUERY, TaskState.RUNNING, 4, 1),
        (b, "e2", Priority.MATERIALIZATION, TaskState.RUNNABLE, 2, 0),
    ]
    assert snap[0].stride == Fraction(1 << 20, 4)
    assert json.loads(json.dumps([x.as_dict() for x in snap]))[1]["priority"] == "materialization"
    assert s.tasks("e2") == (snap[1],)
