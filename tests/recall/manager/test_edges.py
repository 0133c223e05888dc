"""Edges of the Recall Manager: refused submissions, cancelling from inside an output
callback, closing with work in flight."""

from __future__ import annotations

import time

import pytest

from recall.api import EndReason, OutputKind
from recall.manager import DuplicateOperator, ManagerClosed, RecallManager
from scheduler.errors import InvalidTickets, UnknownEvent
from tests.recall.manager.recall_mgr_helpers import Collector, Recorder, event, wait_until

pytestmark = pytest.mark.postgres


def test_a_refused_submission_leaves_nothing_behind(archive):
    rec = Recorder(archive, tickets=0)
    with RecallManager(archive, max_concurrent=1) as mgr:
        mgr.register(rec)
        with pytest.raises(DuplicateOperator):
            mgr.register(rec)
        with pytest.raises(InvalidTickets):
            mgr.submit(event("e1", chunk=3), "rec")
        assert mgr.tasks() == [] and mgr.open_events() == []
        with pytest.raises(UnknownEvent):
            mgr.cancel("e1")


def test_an_output_callback_may_cancel_its_own_event(archive):
    holder: dict = {}

    def cancel_on_first(o):
        if o.kind is OutputKind.INSERT and o.eid == "e1" and "done" not in holder:
            holder["done"] = True
            t0 = time.monotonic()
            holder["n"] = holder["mgr"].cancel("e1")  # from the worker thread itself
            holder["took"] = time.monotonic() - t0

    rec = Recorder(archive)
    out = Collector()
    with RecallManager(archive, max_concurrent=1, on_output=[cancel_on_first, out], cancel_wait=30) as mgr:
        holder["mgr"] = mgr
        mgr.register(rec)
        mgr.submit(event("e1", chunk=5), "rec")
        assert wait_until(lambda: not mgr.open_events())
    assert holder["n"] == 1 and holder["took"] < 5  # no wait on itself
    assert rec.ends() == {"e1": [EndReason.CANCELLED]}
    assert len(rec.chunks_of("e1")) == 1
    assert [o.kind for o in out.of("e1")] == [OutputKind.INSERT, OutputKind.BOUNDARY]


def test_close_cancels_running_work_and_refuses_new(archive, pg):
    rec = Recorder(archive, sql="SELECT v FROM metrics, pg_sleep(:s) AS z WHERE host = 'a'",
                   params=lambda e: {"s": 30})
    out = Collector()
    mgr = RecallManager(archive, max_concurrent=2, on_output=out)
    mgr.register(rec)
    for i in range(5):
        mgr.submit(event(f"e{i}", chunk=3), "rec")
    assert wait_until(lambda: mgr.running() == 2)
    t0 = time.monotonic()
    mgr.close()
    assert time.monotonic() - t0 < 10
    assert mgr.threads() == [] and mgr.connections() == [] and mgr.tasks() == []
    assert sorted(o.eid for o in out.boundaries()) == [f"e{i}" for i in range(5)]
    assert all(v == [EndReason.CANCELLED] for v in rec.ends().values())
    with pytest.raises(ManagerClosed):
        mgr.submit(event("late", chunk=3), "rec")
    mgr.close()  # idempotent


def test_clean_connection_rolls_back_an_aborted_session(pg):
    from recall.manager_worker import clean_connection

    conn = pg.connect()
    try:
        conn.autocommit = True  # as the Archiver's history-queries run
        with conn.cursor() as cur:
            cur.execute("BEGIN TRANSACTION READ ONLY")
            with pytest.raises(Exception, match="division by zero"):
                cur.execute("SELECT 1 / 0")
        assert conn.get_transaction_status() == 3  # in a failed transaction block
        assert clean_connection(conn)
        with conn.cursor() as cur:  # the next query on it works
            cur.execute("SELECT 41 + 1")
            assert cur.fetchone() == (42,)
    finally:
        conn.close()
    assert not clean_connection(conn)  # closed: to be replaced
