"""The event worker takes its backlog at once (a backlog must not add one
batch's fixed cost per batch to the alert latency)."""

from __future__ import annotations

import threading

from moirae.ingest.event_worker import EventWorker


def test_a_backlog_of_one_flow_is_processed_together_in_order():
    gate, first, calls = threading.Event(), threading.Event(), []

    def one(flow, frame, batch_id, replay, started):
        calls.append(("one", flow, [batch_id]))
        first.set()
        gate.wait(10)

    def many(flow, items):
        calls.append(("many", flow, [i[1] for i in items]))

    w = EventWorker(one, many=many)
    w.start()
    w.submit("a", None, 0, False, None)  # taken alone; blocks on the gate
    assert first.wait(10)
    for flow, bid in (("a", 1), ("a", 2), ("b", 3), ("a", 4), ("a", 5)):
        w.submit(flow, None, bid, False, None)
    gate.set()
    w.stop()
    assert calls == [("one", "a", [0]), ("many", "a", [1, 2]), ("one", "b", [3]), ("many", "a", [4, 5])]
    assert w.batches == 6 and w.errors == 0


def test_a_failing_group_is_counted_and_the_worker_goes_on():
    done = []

    def one(flow, bid):
        if bid == 1:
            raise ValueError("bad batch 1")
        done.append(bid)

    w = EventWorker(one)
    w.start()
    for bid in (1, 2):
        w.submit("a", bid)
    w.stop()
    assert w.errors == 1 and "bad batch 1" in w.last_error
    assert done == [2] and w.batches == 1  # without ``many`` each item runs (and fails) on its own
