"""Steering (M 4.4): feedback deadlines by the injected clock,
explicit feedback, accelerate, and the periodic jobs that drive deadlines and cleanup."""

from __future__ import annotations

import threading

import pytest

from recall.api import EndReason, OutputKind
from recall.manager import RecallManager
from recall.periodic import PeriodicJobs
from recall.task import TaskStatus
from scheduler.clock import ManualClock
from scheduler.errors import UnknownEvent
from tests.recall.manager.recall_mgr_helpers import Collector, Recorder, event, wait_until

pytestmark = pytest.mark.postgres

TICK = 1e-6


def _state(mgr, tid):
    return mgr.task(tid).state


def test_feedback_deadline_exactly_at_the_deadline_discards(archive):
    clock = ManualClock(100.0)
    rec = Recorder(archive, feedback_period=2, feedback_timeout=10.0)
    out = Collector()
    with RecallManager(archive, max_concurrent=1, clock=clock, on_output=out) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=5), "rec")
        assert wait_until(lambda: _state(mgr, tid) is TaskStatus.SUSPENDED)
        assert mgr.task(tid).chunks_done == 2  # suspended after its feedback period
        clock.set(110.0 - TICK)  # one tick before the deadline: nothing happens
        assert mgr.expire_feedback() == []
        assert _state(mgr, tid) is TaskStatus.SUSPENDED
        clock.set(110.0)  # exactly at the deadline: discarded
        assert mgr.expire_feedback() == [tid]
        v = mgr.task(tid)
        assert v.state is TaskStatus.DISCARDED and v.chunks_done == 2
    assert rec.ends() == {"e1": [EndReason.DISCARDED]}
    assert [o.kind for o in out.of("e1")][-1] is OutputKind.BOUNDARY
    assert out.of("e1", OutputKind.BOUNDARY)[0].row["ended"] == {tid: "discarded"}


def test_feedback_resumes_for_another_period_then_the_task_finishes(archive):
    clock = ManualClock()
    rec = Recorder(archive, feedback_period=2, feedback_timeout=5.0)
    with RecallManager(archive, max_concurrent=1, clock=clock) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=5), "rec")  # six chunks
        for done in (2, 4):
            assert wait_until(lambda: _state(mgr, tid) is TaskStatus.SUSPENDED)
            assert mgr.task(tid).chunks_done == done
            clock.advance(4.0)
            assert mgr.expire_feedback() == []
            assert mgr.feedback("e1") == [tid]
        assert wait_until(lambda: _state(mgr, tid) is TaskStatus.DONE)
        assert mgr.task(tid).chunks_done == 6
        clock.advance(100.0)
        assert mgr.expire_feedback() == []


def test_accelerate_adds_tickets_and_counts_as_feedback(archive):
    clock = ManualClock()
    rec = Recorder(archive, feedback_period=1, feedback_timeout=5.0, tickets=10)
    with RecallManager(archive, max_concurrent=1, clock=clock) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=5), "rec")
        assert wait_until(lambda: _state(mgr, tid) is TaskStatus.SUSPENDED)
        before = mgr.task(tid).tickets
        assert mgr.accelerate("e1", 50) == 1
        assert wait_until(lambda: mgr.task(tid).chunks_done == 2)
        # deduction proportional to results (M 4.4): 5 rows a chunk at 1/10 ticket a row
        # is half a ticket per chunk, so the second chunk takes one whole ticket
        assert before == 10 and mgr.task(tid).tickets == before + 50 - 1
        with pytest.raises(UnknownEvent):
            mgr.accelerate("nope", 5)


def test_periodic_jobs_discard_and_reap(archive):
    clock = ManualClock()
    rec = Recorder(archive, feedback_period=1, feedback_timeout=3.0)
    with RecallManager(archive, max_concurrent=1, clock=clock, retention=60.0) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=5), "rec")
        assert wait_until(lambda: _state(mgr, tid) is TaskStatus.SUSPENDED)
        with PeriodicJobs(mgr, feedback_every=0.05, cleanup_every=0.05) as jobs:
            assert wait_until(lambda: jobs.runs["feedback"] >= 2 and jobs.runs["cleanup"] >= 2, timeout=10)
            assert _state(mgr, tid) is TaskStatus.SUSPENDED  # the clock has not moved
            clock.advance(3.0)
            assert wait_until(lambda: _state(mgr, tid) is TaskStatus.DISCARDED, timeout=10)
            clock.advance(59.0)
            runs = jobs.runs["cleanup"]
            assert wait_until(lambda: jobs.runs["cleanup"] > runs + 1, timeout=10)
            assert [v.task_id for v in mgr.tasks()] == [tid]  # 59 s after its end: still kept
            clock.advance(1.0)
            assert wait_until(lambda: mgr.tasks() == [], timeout=10)
        assert not jobs.running


def test_feedback_for_unknown_event_is_an_error(archive):
    with RecallManager(archive, max_concurrent=1) as mgr, pytest.raises(UnknownEvent, match="ghost"):
        mgr.feedback("ghost")


def test_equal_tickets_every_task_gets_its_first_chunk_before_any_its_third(archive):
    gate = threading.Event()

    def hold_first(eid, chunk_id):
        gate.wait(10)  # the first quantum waits until every event has been submitted

    rec = Recorder(archive, on_chunk_hook=hold_first)
    with RecallManager(archive, max_concurrent=1) as mgr:
        mgr.register(rec)
        eids = [f"e{i}" for i in range(25)]
        for eid in eids:
            mgr.submit(event(eid, chunk=5), "rec")
        gate.set()
        assert wait_until(lambda: not mgr.open_events(), timeout=60)
    order = [e for k, e, _ in rec.log if k == "chunk"]
    assert len(order) == 25 * 6
    seen: dict[str, int] = {}
    first_third = None
    last_first = None
    for i, eid in enumerate(order):
        seen[eid] = seen.get(eid, 0) + 1
        if seen[eid] == 1:
            last_first = i
        if seen[eid] == 3 and first_third is None:
            first_third = i
    assert last_first < first_third
    # stride with equal tickets is round-robin: each round serves every event once
    for r in range(6):
        assert sorted(order[25 * r: 25 * (r + 1)]) == sorted(eids)


def test_query_tasks_run_before_materialization_tasks(archive):
    gate = threading.Event()
    order: list[str] = []

    def log(eid, chunk_id):
        order.append(eid)
        gate.wait(10)

    query = Recorder(archive, name="q", on_chunk_hook=log)
    mat = Recorder(archive, name="m", on_chunk_hook=log, materialization=True)
    with RecallManager(archive, max_concurrent=1) as mgr:
        mgr.register(query)
        mgr.register(mat)
        mgr.submit(event("q0", chunk=2), "q")  # its first chunk holds the only worker ...
        for i in range(3):
            mgr.submit(event(f"m{i}", chunk=2), "m")
            mgr.submit(event(f"q{i + 1}", chunk=2), "q")
        gate.set()  # ... until every task has been submitted
        assert wait_until(lambda: not mgr.open_events(), timeout=60)
    # with the only slot busy the system is never lightly loaded: every query chunk first
    assert len(order) == 7 * 3
    assert all(e.startswith("q") for e in order[:12]) and all(e.startswith("m") for e in order[12:])
