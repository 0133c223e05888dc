"""The Recall Manager runs tasks chunk by chunk, newest first, against a real Archiver
(M 4.3, 4.4), and emits one boundary per event once all its tasks end (M 4.6)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recall.api import EndReason, OutputKind
from recall.manager import RecallManager, UnknownOperator
from recall.task import TaskStatus
from tests.recall.manager.recall_mgr_helpers import SPAN, T0, Collector, Recorder, event, wait_until

pytestmark = pytest.mark.postgres


def _done(mgr: RecallManager, eids) -> bool:
    return not set(eids) & set(mgr.open_events())


def test_chunks_newest_first_with_interval_and_parameters(archive):
    rec = Recorder(archive)
    out = Collector()
    with RecallManager(archive, max_concurrent=2, on_output=out) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=4, host="b"), "rec")
        assert wait_until(lambda: _done(mgr, ["e1"]))
        view = mgr.task(tid)
        api = json.loads(json.dumps([v.as_dict() for v in mgr.tasks()]))  # what the HTTP API serves
        [desc] = [d.as_dict() for d in mgr.descriptions()]
    assert api[0]["state"] == "done" and api[0]["chunks_done"] == 5 and api[0]["rows"] == 25
    assert desc == {"operator": "rec", "template": "SELECT host, v FROM metrics WHERE host = :host",
                    "streams": ["metrics"], "submitted": 1, "ended": 1}
    # the event sits in chunk 4 (from T0): chunks 4..0 of the six, newest first
    base = archive.grid.chunk_of(T0)
    assert rec.chunks_of("e1") == [base + 4, base + 3, base + 2, base + 1, base]
    inserts = out.of("e1", OutputKind.INSERT)
    assert [o.key for o in inserts] == [str(base + i) for i in (4, 3, 2, 1, 0)]
    # the Archiver applied each chunk's interval: 5 rows of host b per chunk, the right ones
    assert all(o.row["rows"] == 5 for o in inserts)
    assert inserts[0].row["values"] == [20.0, 21.0, 22.0, 23.0, 24.0]
    # covered grows backwards from the newest chunk's end
    assert inserts[0].covered.start == T0 + 4 * SPAN and inserts[0].covered.end == T0 + 5 * SPAN
    assert inserts[-1].covered.start == T0 and inserts[-1].covered.end == T0 + 5 * SPAN
    assert view.state is TaskStatus.DONE and view.chunks_done == view.chunks_total == 5
    assert view.rows == 25 and view.outputs == 6 and view.error is None
    assert view.time_to_first_result is not None and view.time_spent > 0


def test_bounded_task_stops_at_its_bound(archive):
    rec = Recorder(archive, bound=timedelta(hours=2))  # event at 3:30 -> needs 1:30 .. 3:30
    with RecallManager(archive, max_concurrent=1) as mgr:
        mgr.register(rec)
        mgr.submit(event("e1", chunk=3), "rec")
        assert wait_until(lambda: _done(mgr, ["e1"]))
    base = archive.grid.chunk_of(T0)
    assert rec.chunks_of("e1") == [base + 3, base + 2, base + 1]
    assert rec.ends() == {"e1": [EndReason.DONE]}


def test_boundary_once_per_event_after_all_its_tasks(archive):
    a, b = Recorder(archive, name="a"), Recorder(archive, name="b", sql="SELECT v FROM metrics")
    out = Collector()
    with RecallManager(archive, max_concurrent=3, on_output=out) as mgr:
        mgr.register(a)
        mgr.register(b)
        ids = {f"e{i}": mgr.submit(event(f"e{i}", chunk=5), ["a", "b"]) for i in range(6)}
        assert all(len(v) == 2 for v in ids.values())
        assert wait_until(lambda: _done(mgr, ids))
    bounds = out.boundaries()
    assert sorted(o.eid for o in bounds) == sorted(ids)  # exactly one per event
    for eid in ids:
        outs = out.of(eid)
        assert outs[-1].kind is OutputKind.BOUNDARY  # after every output of the event
        boundary = outs[-1]
        assert boundary.operator == "a,b" and boundary.row["tasks"] == 2
        assert set(boundary.row["ended"].values()) == {"done"}
        assert boundary.seq > max(o.seq for o in outs[:-1])


def test_event_with_no_history_ends_at_once(archive):
    rec = Recorder(archive)
    out = Collector()
    with RecallManager(archive, max_concurrent=1, on_output=out) as mgr:
        mgr.register(rec)
        early = {"eid": "old", "ts": T0 - 10 * SPAN}
        [tid] = mgr.submit(early, "rec")
        assert mgr.task(tid).state is TaskStatus.DONE and mgr.task(tid).chunks_total == 0
    assert [o.kind for o in out.of("old")] == [OutputKind.UPDATE, OutputKind.BOUNDARY]


def test_unknown_operator_is_named(archive):
    with RecallManager(archive, max_concurrent=1) as mgr, pytest.raises(UnknownOperator, match="nope"):
        mgr.submit(event("e1", 1), "nope")


def test_results_reach_the_bus_and_the_results_table(archive, pg):
    from recall.outputs import StoredOutputs

    table = StoredOutputs(pg, batch_size=3)
    rec = Recorder(archive)
    with RecallManager(archive, max_concurrent=2, on_output=table) as mgr:
        sub = mgr.bus.subscribe(eid="e2")
        mgr.register(rec)
        mgr.submit(event("e1", chunk=2), "rec")
        mgr.submit(event("e2", chunk=1), "rec")
        assert wait_until(lambda: _done(mgr, ["e1", "e2"]))
    assert table.flush()
    table.close()
    got = [(o.kind, o.key) for o in sub.drain()]
    base = archive.grid.chunk_of(T0)
    assert got == [(OutputKind.INSERT, str(base + 1)), (OutputKind.INSERT, str(base)),
                   (OutputKind.UPDATE, "total"), (OutputKind.BOUNDARY, "")]
    stored = table.read(eid="e2")
    assert [(o.kind, o.key) for o in sorted(stored, key=lambda o: o.seq)] == got
    assert stored[0].row["rows"] == 5 and stored[0].covered.end == T0 + 2 * SPAN
    assert len(table.read()) == 4 + 5  # e1: three chunks, a total and a boundary


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(st.tuples(st.integers(-1, 7), st.one_of(st.none(), st.integers(0, 5))), min_size=1, max_size=6),
    workers=st.integers(1, 3),
)
def test_every_task_reads_its_planned_chunks_newest_first_and_each_event_gets_one_boundary(
        archive, events, workers):
    recs = {}
    out = Collector()
    with RecallManager(archive, max_concurrent=workers, on_output=out) as mgr:
        for hours in {b for _, b in events}:
            rec = Recorder(archive, name=f"b{hours}", bound=None if hours is None else hours * SPAN)
            recs[hours] = rec
            mgr.register(rec)
        for i, (chunk, hours) in enumerate(events):
            mgr.submit(event(f"p{i}", chunk=chunk), f"b{hours}")
        assert wait_until(lambda: not mgr.open_events())
    all_ids = archive.chunk_ids(["metrics"])
    for i, (chunk, hours) in enumerate(events):
        ev = event(f"p{i}", chunk=chunk)
        bound = None if hours is None else ev["ts"] - hours * SPAN
        want = [c for c in sorted(all_ids, reverse=True)
                if archive.grid.bounds(c)[0] <= ev["ts"] and (bound is None or archive.grid.bounds(c)[1] > bound)]
        assert recs[hours].chunks_of(f"p{i}") == want
        assert [o.kind for o in out.of(f"p{i}")].count(OutputKind.BOUNDARY) == 1
        assert out.of(f"p{i}")[-1].kind is OutputKind.BOUNDARY
