"""Waldspurger's dynamic stride queue: exact passes, join / leave / modify, and config."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    InvalidSchedulerConfig,
    InvalidTickets,
    SchedulerConfig,
    StrideQueue,
    UnknownTask,
    relative_error,
)


def spin(q: StrideQueue, n: int) -> list[str]:
    out = []
    for _ in range(n):
        c = q.pick()
        assert c is not None
        q.grant(c)
        q.release(c)
        out.append(c)
    return out


def test_new_client_in_empty_queue_starts_one_stride_after_the_global_pass():
    q = StrideQueue(stride1=12)
    q.join("a", 4, seq=0)
    assert q.pass_of("a") == 3 and q.stride("a") == 3 and q.global_tickets == 4


def test_global_pass_advances_by_the_global_stride_exactly():
    q = StrideQueue(stride1=10)
    q.join("a", 3, seq=0)
    q.join("b", 4, seq=1)
    spin(q, 5)
    assert q.global_pass == Fraction(5 * 10, 7)


def test_no_drift_over_a_long_run_with_awkward_tickets():
    # 997 and 1000 tickets: strides are not integers of stride1 = 2**20; with exact
    # fractions the pairwise error never grows, even after 50k quanta
    q = StrideQueue()
    q.join("a", 997, seq=0)
    q.join("b", 1000, seq=1)
    count = {"a": 0, "b": 0}
    worst = Fraction(0)
    for c in spin(q, 50_000):
        count[c] += 1
        worst = max(worst, relative_error(count["a"], 997, count["b"], 1000))
    assert worst <= 1
    assert abs(count["a"] * 1000 - count["b"] * 997) <= 1997


def test_leave_and_rejoin_restore_the_remain():
    q = StrideQueue(stride1=60)
    for i, cid in enumerate("abc"):
        q.join(cid, 6, seq=i)
    spin(q, 4)
    remain = q.pass_of("c") - int(q.global_pass)
    q.leave("c")
    assert q.global_tickets == 12
    spin(q, 6)
    q.rejoin("c")
    assert q.pass_of("c") - int(q.global_pass) == remain
    assert q.global_tickets == 18


def test_rejoin_cannot_jump_before_the_invariant_allows():
    q = StrideQueue(stride1=60)
    q.join("a", 6, seq=0)
    q.join("b", 6, seq=1)
    q.leave("b")  # b keeps its remain (one stride)
    spin(q, 50)  # a alone runs far ahead; the global pass keeps up with it
    q.rejoin("b")
    # b may not start more than one stride behind a's previous pass
    assert q.pass_of("b") >= q.pass_of("a") - q.stride("a")


def test_modify_rescales_the_remain_by_the_stride_ratio():
    q = StrideQueue(stride1=120)
    q.join("a", 10, seq=0)
    q.join("b", 10, seq=1)
    spin(q, 1)
    g = int(q.global_pass)
    remain = q.pass_of("a") - g
    q.modify("a", 40)  # stride / 4
    assert q.pass_of("a") == g + remain / 4
    assert q.stride("a") == 3 and q.global_tickets == 50
    q.leave("b")
    r = q.pass_of("b") - int(q.global_pass)
    q.modify("b", 5)  # while out of the queue: only the remain scales
    assert q.pass_of("b") - int(q.global_pass) == r * 2


def test_running_client_is_not_picked_and_holds_its_tickets():
    q = StrideQueue(stride1=8)
    q.join("a", 1, seq=0)
    q.grant("a")
    assert q.pick() is None and q.global_tickets == 1
    with pytest.raises(InvalidTickets, match="'a'"):
        q.grant("a")
    q.release("a")
    assert q.pick() == "a"


def test_stale_heap_entries_are_compacted():
    q = StrideQueue()
    q.join("a", 1, seq=0)
    q.join("b", 1, seq=1)
    for t in range(2, 500):
        q.modify("a", t)
    assert len(q._heap) <= 2 * q.runnable_count + 64


def test_unknown_client_and_bad_tickets_are_named():
    q = StrideQueue()
    with pytest.raises(UnknownTask, match="'zz'"):
        q.remove("zz")
    with pytest.raises(InvalidTickets, match="'a'.*0"):
        q.join("a", 0, seq=0)
    with pytest.raises(InvalidTickets, match="1.5"):
        q.join("a", 1.5, seq=0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("stride1", 0),
        ("min_tickets", 0),
        ("default_tickets", 0),
        ("tickets_per_result", -1),
        ("tickets_per_result", "lots"),
        ("light_load", float("nan")),
        ("feedback_timeout", -5),
        ("feedback_period", 0),
        ("background_slots", -1),
    ],
)
def test_bad_config_values_name_the_key(key, value):
    with pytest.raises(InvalidSchedulerConfig, match=f"scheduler.{key}"):
        SchedulerConfig(**{key: value})


def test_default_tickets_must_respect_the_floor():
    with pytest.raises(InvalidSchedulerConfig, match="default_tickets"):
        SchedulerConfig(min_tickets=50, default_tickets=10)


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["join", "run", "grant", "release", "leave", "rejoin", "modify", "remove"]),
                  st.integers(0, 7), st.integers(1, 40)),
        max_size=80,
    )
)
def test_incremental_bookkeeping_matches_brute_force(ops):
    q = StrideQueue(stride1=1000)
    seq = 0
    for op, k, t in ops:
        cid = f"c{k}"
        present = cid in q
        c = q._clients.get(cid)
        if op == "join" and not present:
            q.join(cid, t, seq)
            seq += 1
        elif op == "run":
            spin(q, t % 5) if q.pick() else None
        elif op == "grant" and present and c.runnable:
            q.grant(cid)
        elif op == "release" and present:
            q.release(cid)
        elif op == "leave" and present:
            q.leave(cid)
        elif op == "rejoin" and present:
            q.rejoin(cid)
        elif op == "modify" and present:
            q.modify(cid, t)
        elif op == "remove" and present:
            q.remove(cid)
        active = [x for x in q._clients.values() if x.active]
        assert q.global_tickets == sum(x.tickets for x in active)
        assert q.runnable_count == sum(x.runnable for x in active)
        assert q.min_active_pass() == min((x.pass_ for x in active), default=None)
        if active:
            assert q._max_previous_pass() == max(x.pass_ - x.stride for x in active)
        runnable = [(x.pass_, x.served, x.seq) for x in active if x.runnable]
        picked = q.pick()
        assert (picked is None) == (not runnable)
        if picked is not None:
            x = q._clients[picked]
            assert (x.pass_, x.served, x.seq) == min(runnable)


def test_many_joins_stay_cheap():
    q = StrideQueue()
    for i in range(5000):
        q.join(f"c{i}", 1 + i % 97, seq=i)
    spin(q, 5000)
    assert len(q._prev) <= 2 * 5000 + 64 and len(q._heap) <= 2 * 5000 + 64
