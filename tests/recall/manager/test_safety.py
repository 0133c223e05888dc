"""History-queries take event attributes as bound values only, and a failing one fails
its own task, visibly, while the others go on (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import pytest

from recall.api import EndReason, OutputKind
from recall.manager import RecallManager
from recall.task import TaskStatus
from tests.recall.manager.recall_mgr_helpers import Collector, Recorder, event, wait_until

pytestmark = pytest.mark.postgres

INJECTIONS = ["'; DROP TABLE victim; --", "a' OR '1'='1", "b'); DELETE FROM metrics; --", "\\'; SELECT 1; --"]


def test_sql_text_in_an_event_is_bound_as_a_value(archive, pg):
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE victim (x int)")
        cur.execute("INSERT INTO victim VALUES (1), (2)")
        cur.execute("SELECT count(*) FROM metrics")
        before = cur.fetchone()[0]
    rec = Recorder(archive)
    out = Collector()
    with RecallManager(archive, max_concurrent=2, on_output=out) as mgr:
        mgr.register(rec)
        for i, text in enumerate(INJECTIONS):
            mgr.submit(event(f"x{i}", chunk=3, host=text), "rec")
        mgr.submit(event("ok", chunk=3, host="a"), "rec")
        assert wait_until(lambda: not mgr.open_events())
        views = {v.eid: v for v in mgr.tasks()}
    for i in range(len(INJECTIONS)):
        v = views[f"x{i}"]
        # the query ran fine, matching no host of that name: not a single row, no error
        assert v.state is TaskStatus.DONE and v.error is None and v.rows == 0 and v.chunks_done == 4
    assert views["ok"].rows == 20  # the same template with a real host still works
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM victim")
        assert cur.fetchone()[0] == 2
        cur.execute("SELECT count(*) FROM metrics")
        assert cur.fetchone()[0] == before


def test_a_failing_history_query_fails_its_task_only(archive):
    # the cast fails in PostgreSQL at run time for this event's parameter only
    bad = Recorder(archive, name="bad", sql="SELECT v FROM metrics WHERE v > CAST(:limit AS double precision)",
                   params=lambda e: {"limit": e["limit"]})
    good = Recorder(archive, name="good")
    out = Collector()
    with RecallManager(archive, max_concurrent=2, on_output=out) as mgr:
        mgr.register(bad)
        mgr.register(good)
        # one event, two operators: the failing one must not stop the other
        t_fail, t_ok = mgr.submit(event("e1", chunk=4, limit="not a number"), ["bad", "good"])
        [t_ok2] = mgr.submit(event("e2", chunk=4, limit="3"), "bad")
        assert wait_until(lambda: not mgr.open_events())
        failed, ok, ok2 = mgr.task(t_fail), mgr.task(t_ok), mgr.task(t_ok2)
    assert failed.state is TaskStatus.FAILED and failed.chunks_done == 0
    assert "invalid input syntax" in failed.error and "not a number" in failed.error
    assert ok.state is TaskStatus.DONE and ok.chunks_done == 5 and ok.error is None
    assert ok2.state is TaskStatus.DONE and ok2.rows > 0
    assert bad.ends()["e1"] == [EndReason.FAILED]
    [boundary] = [o for o in out.of("e1") if o.kind is OutputKind.BOUNDARY]
    assert sorted(boundary.row["ended"].values()) == ["done", "failed"]


def test_a_failing_operator_fails_its_task(archive):
    def explode(eid, chunk_id):
        if eid == "boom":
            raise ZeroDivisionError("operator blew up")

    rec = Recorder(archive, on_chunk_hook=explode)
    with RecallManager(archive, max_concurrent=1) as mgr:
        mgr.register(rec)
        [t1] = mgr.submit(event("boom", chunk=2), "rec")
        [t2] = mgr.submit(event("fine", chunk=2), "rec")
        assert wait_until(lambda: not mgr.open_events())
        assert mgr.task(t1).state is TaskStatus.FAILED and "operator blew up" in mgr.task(t1).error
        assert mgr.task(t2).state is TaskStatus.DONE


def test_statement_timeout_fails_the_task_with_the_timeout_named(archive):
    slow = Recorder(archive, name="slow", sql="SELECT v FROM metrics, pg_sleep(:s) AS z WHERE host = 'a'",
                    params=lambda e: {"s": 2})
    with RecallManager(archive, max_concurrent=1, timeout_ms=100) as mgr:
        mgr.register(slow)
        [tid] = mgr.submit(event("e1", chunk=1), "slow")
        assert wait_until(lambda: not mgr.open_events())
        v = mgr.task(tid)
    assert v.state is TaskStatus.FAILED and "HistoryQueryTimeout" in v.error and "100 ms" in v.error


def test_a_task_ending_at_once_does_not_close_its_event_early(archive):
    """Regression: with two operators in one submit, the first ending immediately (no
    chunk to read) used to emit the event's boundary before the second task existed,
    and the second then got a boundary of its own."""
    from archive import StreamSpec

    archive.register_stream(StreamSpec.build("nothing_here", "ts", {"v": "bigint"}))
    empty = Recorder(archive, name="empty", sql="SELECT v FROM nothing_here")
    rec = Recorder(archive)
    out = Collector()
    with RecallManager(archive, max_concurrent=2, on_output=out) as mgr:
        mgr.register(empty)
        mgr.register(rec)
        mgr.submit(event("e1", chunk=3, host="a"), ["empty", "rec"])
        assert wait_until(lambda: not mgr.open_events())
    boundaries = [o for o in out.of("e1") if o.kind is OutputKind.BOUNDARY]
    assert len(boundaries) == 1
    assert boundaries[0].row["tasks"] == 2
    assert boundaries[0].seq > max(o.seq for o in out.of("e1") if o.kind is not OutputKind.BOUNDARY)
