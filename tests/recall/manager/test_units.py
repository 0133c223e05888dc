"""Pure parts of the Recall Manager: chunk planning (M fig. 9), the output bus's
drop-oldest contract, and the FIFO baseline policy."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.abc import ChunkGrid
from recall.outputs import Bus, jsonable
from recall.task import plan_chunks
from scheduler.clock import ManualClock
from scheduler.errors import UnknownEvent
from scheduler.events import TaskSuspended
from scheduler.fifo import FifoScheduler

GRID = ChunkGrid(timedelta(minutes=10))
BASE = datetime(2026, 3, 1, tzinfo=UTC)


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(-50, 50), max_size=40),
    ev=st.integers(-3000, 3000),
    back=st.one_of(st.none(), st.integers(0, 3000)),
)
def test_plan_chunks_newest_first_within_event_and_bound(ids, ev, back):
    event_ts = BASE + timedelta(seconds=ev * 7)
    bound = None if back is None else event_ts - timedelta(seconds=back * 5)
    base = GRID.chunk_of(BASE)
    chunk_ids = [base + i for i in ids]
    plan = plan_chunks(chunk_ids, GRID, event_ts, bound)
    assert plan == sorted(set(plan), reverse=True)  # newest first, each once
    for c in set(chunk_ids):
        start, end = GRID.bounds(c)
        wanted = start <= event_ts and (bound is None or end > bound)
        assert (c in plan) == wanted, (c, start, end, event_ts, bound)


def test_bus_drops_oldest_for_a_slow_subscriber_only():
    bus = Bus()
    slow = bus.subscribe(maxsize=3)
    fast = bus.subscribe(maxsize=100)
    t0 = time.monotonic()
    for i in range(50):
        bus.publish(i)
    assert time.monotonic() - t0 < 1.0  # never blocks on a full subscriber
    assert list(slow.drain()) == [47, 48, 49] and slow.dropped == 47
    assert list(fast.drain()) == list(range(50)) and fast.dropped == 0
    assert bus.published == 50


def test_subscription_iterates_until_closed_and_filters_by_event():
    bus = Bus()

    class Out:
        def __init__(self, eid, n):
            self.eid, self.n = eid, n

    sub = bus.subscribe(eid="e1")
    got = []
    reader = threading.Thread(target=lambda: got.extend(o.n for o in sub))
    reader.start()
    for i in range(5):
        bus.publish(Out("e1" if i % 2 == 0 else "e2", i))
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sub.close()
    reader.join(5)
    assert got == [0, 2, 4] and not reader.is_alive()
    assert bus.subscribers == 0
    assert sub.get(timeout=0.01) is None


def test_jsonable_makes_rows_storable():
    import numpy as np
    import pandas as pd

    row = {"n": np.int64(3), "x": np.float64("nan"), "t": pd.Timestamp("2026-01-01", tz="UTC"), "l": (1, 2.0)}
    assert jsonable(row) == {"n": 3, "x": None, "t": "2026-01-01T00:00:00+00:00", "l": [1, 2.0]}


def test_fifo_serves_tasks_in_arrival_order_and_steers_like_stride():
    clock = ManualClock()
    f = FifoScheduler(clock=clock)
    a = f.submit("e1", bounded=True)
    b = f.submit("e2", feedback_period=1, feedback_timeout=5)
    g1 = f.choose()
    g2 = f.choose()  # a second slot: the next oldest runnable task
    assert (g1.task_id, g2.task_id) == (a, b) and f.choose() is None
    assert any(isinstance(e, TaskSuspended) for e in f.complete(b, results=1))
    f.complete(a, results=1)
    assert f.choose().task_id == a
    clock.advance(4.999)
    assert f.expire() == ()
    clock.advance(0.001)
    [gone] = f.expire()
    assert gone.task_id == b and gone.was_running is False
    assert f.cancel("e1") == (a,)
    assert f.complete(a, results=0) == ()  # the cancelled quantum in flight is accepted
    assert len(f) == 0
    with pytest.raises(UnknownEvent, match="e1"):
        f.cancel("e1")
