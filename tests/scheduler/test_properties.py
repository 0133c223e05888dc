"""Property tests of stride scheduling (M 4.4; Waldspurger).

What is asserted, precisely:

- *First chunk first.* Under equal tickets, every task gets its first quantum before any
  task gets its third; stronger, before any other task gets two more quanta after the
  task's submission (late joiners included, with up to 4 quanta in flight); stronger
  still, while some task waits for its first quantum, every grant goes to a task waiting
  for its first (a newcomer is not queued behind the tasks sharing the lowest pass).
- *Pairwise bound.* With fixed tickets, after every prefix of the run and for every
  pair i, j, the pairwise relative error ``|q_i * t_j - q_j * t_i| / (t_i + t_j)``
  (Waldspurger's: the absolute error of i in the system of i and j alone) is <= 1
  quantum; when the tasks joined at a common base pass (submitted in increasing ticket
  order, so no join is clamped) it is <= ``max(t_i, t_j) / (t_i + t_j)`` < 1.
  ``scheduler.fairness.stride_pair_bound`` gives both proofs. The check is exact
  (no tolerance) because strides are exact fractions. The absolute error of a task against the whole
  system is not bounded by one (it is O(n) for flat stride scheduling): it is only
  reported, through hypothesis ``event``.
- *Late joiner.* A task joining a running system, with quanta counted from its join,
  keeps a pairwise relative error of at most 1 quantum with every task: it neither
  starves the others nor is starved. (Its join keeps the invariant of the bound, see
  ``scheduler.stride``; its start pass lies between the others' previous and current
  passes, which gives the same one-quantum bound counted from the join.)
"""

from __future__ import annotations

import random
from fractions import Fraction
from itertools import combinations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler import (
    ManualClock,
    SchedulerConfig,
    StrideScheduler,
    absolute_error,
    relative_error,
    stride_pair_bound,
)
from tests.scheduler.stride_sim import run_concurrent, run_sequential

NO_DEDUCTION = SchedulerConfig(tickets_per_result=0)


def _sched() -> StrideScheduler:
    return StrideScheduler(NO_DEDUCTION, clock=ManualClock())


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    tickets=st.integers(1, 500),
    slots=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_task_gets_its_first_quantum_before_any_task_gets_its_third(n, tickets, slots, seed):
    s = _sched()
    for i in range(n):
        s.submit(f"e{i}", tickets=tickets)
    trace = run_concurrent(s, 4 * n, slots=slots, rng=random.Random(seed))
    counts: dict[str, int] = {}
    for _, tid in trace:
        counts[tid] = counts.get(tid, 0) + 1
        if counts[tid] == 3:
            assert len(counts) == n, f"{tid} got its third quantum while {n - len(counts)} tasks had none"
    assert len(counts) == n


@st.composite
def arrival_plans(draw):
    """Equal-ticket tasks: some at the start, the rest arriving at chosen grant numbers."""
    initial = draw(st.integers(1, 6))
    late = draw(st.lists(st.integers(0, 60), max_size=8))
    return initial, sorted(late)


@settings(max_examples=60, deadline=None)
@given(plan=arrival_plans(), tickets=st.integers(1, 300), slots=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_newcomer_is_served_before_anyone_gets_two_more_quanta(plan, tickets, slots, seed):
    initial, late = plan
    s = _sched()
    submitted_at: dict[str, int] = {}

    def submitter(name: str, at: int):
        def go() -> str:
            tid = s.submit(name, tickets=tickets)
            submitted_at[tid] = at
            return tid

        return go

    for i in range(initial):
        submitter(f"e{i}", 0)()
    arrivals: dict[int, list] = {}
    for j, at in enumerate(late):
        arrivals.setdefault(at, []).append(submitter(f"late{j}", at))
    trace = run_concurrent(s, 90, slots=slots, rng=random.Random(seed), arrivals=arrivals)
    first_at = {}
    for k, tid in trace:
        first_at.setdefault(tid, k)
    for tid, joined in submitted_at.items():
        assert tid in first_at, f"{tid} (joined at grant {joined}) never ran"
        window = [other for k, other in trace if joined <= k < first_at[tid] and other != tid]
        worst = max((window.count(o) for o in set(window)), default=0)
        assert worst <= 1, f"{tid} joined at grant {joined}, first ran at {first_at[tid]}; another task got {worst}"
    # stronger: while a task waits for its first quantum, every grant goes to such a task
    # (its own or another newcomer's), however many tasks share the lowest pass
    for k, tid in trace:
        waiting = [t for t, joined in submitted_at.items() if joined <= k <= first_at[t]]
        assert not waiting or tid in waiting, f"grant {k} went to {tid} while {waiting} waited for a first quantum"


@settings(max_examples=60, deadline=None)
@given(
    tickets=st.lists(st.integers(1, 60), min_size=2, max_size=7),
    quanta=st.integers(1, 400),
    increasing=st.booleans(),
)
def test_pairwise_relative_error_stays_within_stride_bound_on_every_prefix(tickets, quanta, increasing):
    if increasing:
        tickets = sorted(tickets)
    s = _sched()
    tids = [s.submit(f"e{i}", tickets=t) for i, t in enumerate(tickets)]
    t_of = dict(zip(tids, tickets, strict=True))
    trace = run_sequential(s, quanta)
    assert len(trace) == quanta
    q = dict.fromkeys(tids, 0)
    worst_abs = Fraction(0)
    total = sum(tickets)
    for n, tid in enumerate(trace, start=1):
        q[tid] += 1
        for a, b in combinations(tids, 2):
            err = relative_error(q[a], t_of[a], q[b], t_of[b])
            bound = stride_pair_bound(t_of[a], t_of[b], common_base=increasing)
            assert err <= bound <= 1, f"after {n} quanta: {a}:{q[a]}/{t_of[a]} vs {b}:{q[b]}/{t_of[b]} err {err}"
        worst_abs = max([worst_abs] + [absolute_error(q[x], t_of[x], n, total) for x in tids])
    # reported, not asserted: flat stride scheduling's absolute error may exceed one
    event(f"max absolute error >= 1 quantum: {worst_abs >= 1}")


@settings(max_examples=60, deadline=None)
@given(
    tickets=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    newcomer=st.integers(1, 40),
    before=st.integers(0, 120),
    after=st.integers(1, 200),
)
def test_late_joiner_neither_starves_nor_is_starved(tickets, newcomer, before, after):
    s = _sched()
    tids = [s.submit(f"e{i}", tickets=t) for i, t in enumerate(tickets)]
    t_of = dict(zip(tids, tickets, strict=True))
    run_sequential(s, before)
    late = s.submit("late", tickets=newcomer)
    t_of[late] = newcomer
    q = dict.fromkeys(t_of, 0)
    for n, tid in enumerate(run_sequential(s, after), start=1):
        q[tid] += 1
        for other in tids:
            err = relative_error(q[late], newcomer, q[other], t_of[other])
            assert err <= 1, f"{n} quanta after the join: late {q[late]}/{newcomer} vs {other} {q[other]}/{t_of[other]}"


@settings(max_examples=30, deadline=None)
@given(
    tickets=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    ops=st.lists(st.tuples(st.sampled_from(["run", "accelerate", "cancel", "submit"]), st.integers(0, 9)), max_size=40),
)
def test_same_calls_give_the_same_schedule(tickets, ops):
    def play() -> list[str]:
        s = StrideScheduler(SchedulerConfig(tickets_per_result=Fraction(1, 3)), clock=ManualClock())
        for i, t in enumerate(tickets):
            s.submit(f"e{i}", tickets=t)
        trace: list[str] = []
        for op, x in ops:
            eids = s.events()
            if op == "run":
                trace += run_sequential(s, x, results=lambda tid: len(tid))
            elif op == "submit":
                s.submit(f"n{len(trace)}-{x}", tickets=x + 1)
            elif eids:
                eid = eids[x % len(eids)]
                s.accelerate(eid, x + 1) if op == "accelerate" else s.cancel(eid)
        return trace + [repr(s.tasks())]

    assert play() == play()
