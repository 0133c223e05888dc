"""Cancelling an event frees all of its work at once (M 4.4; docs/ARCHITECTURE.md: "cancelled
tasks leave no thread, connection or memory behind")."""

from __future__ import annotations

import gc
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from recall.api import EndReason, OutputKind
from recall.manager import RecallManager
from recall.task import RecallTask
from scheduler.errors import UnknownEvent
from scheduler.events import TaskCancelled
from tests.recall.manager.recall_mgr_helpers import SPAN, Collector, Recorder, event, wait_until

pytestmark = pytest.mark.postgres

SLEEPY = "SELECT v FROM metrics, pg_sleep(:s) AS z WHERE host = :host"
#: every sleep of this module lasts a whole number of seconds plus this fraction, unique
#: to the run, so the queries counted below are this module's, whatever else the server runs
MARK = round(random.Random().randint(1, 99_999) * 1e-7, 7)
LONG, STORM = 30 + MARK, 20 + MARK


def _sleeping(pg) -> list[tuple[int, str]]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT pid, state FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND (query ILIKE %s OR query ILIKE %s) AND state = 'active'",
                    (f"%pg_sleep({LONG!r})%", f"%pg_sleep({STORM!r})%"))
        return cur.fetchall()


def _states(pg, pids) -> dict[int, str]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT pid, state FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),))
        return dict(cur.fetchall())


def _live_tasks() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, RecallTask))


def test_cancel_a_running_query_returns_at_once(archive, pg):
    rec = Recorder(archive, sql=SLEEPY, params=lambda e: {"s": LONG, "host": "a"})
    out = Collector()
    with RecallManager(archive, max_concurrent=2, on_output=out) as mgr:
        mgr.register(rec)
        mgr.submit(event("slow", chunk=3), "rec")
        [keep] = mgr.submit(event("keep", chunk=3), "rec")
        assert wait_until(lambda: len(_sleeping(pg)) == 2)
        t0 = time.monotonic()
        assert mgr.cancel("slow") == 1
        assert time.monotonic() - t0 < 5  # not the 30 s the query would have slept
        assert len(_sleeping(pg)) == 1  # only "keep" still sleeps
        assert [v.eid for v in mgr.tasks()] == ["keep"]  # nothing of "slow" is kept
        assert rec.ends() == {"slow": [EndReason.CANCELLED]}
        [b] = out.of("slow", OutputKind.BOUNDARY)
        assert b.row["ended"] == {"r1": "cancelled"}
        pids = mgr.connections()
        assert len(pids) == 2 and sorted(_states(pg, pids).values()) == ["active", "idle"]
        assert mgr.cancel("keep") == 1 and mgr.task  # the other one too
        assert _sleeping(pg) == []
        assert keep not in {v.task_id for v in mgr.tasks()}


@pytest.mark.slow
def test_cancel_storm_leaves_nothing_behind(archive, pg):
    n, workers = 1000, 4
    rec = Recorder(archive, sql=SLEEPY, params=lambda e: {"s": STORM, "host": e["host"]})
    out = Collector()
    threads_before = {t.ident for t in threading.enumerate()}
    mgr = RecallManager(archive, max_concurrent=workers, on_output=out)
    mgr.register(rec)
    hit_running = []
    mgr.scheduler.add_listener(lambda e: hit_running.append(e.task_id)
                               if isinstance(e, TaskCancelled) and e.was_running else None)
    eids = [f"s{i}" for i in range(n)]
    for i, eid in enumerate(eids):
        mgr.submit(event(eid, chunk=i % 6, host="a" if i % 2 else "b"), "rec")
    assert wait_until(lambda: len(_sleeping(pg)) == workers)  # their queries are running
    assert len(mgr.tasks()) == n
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:  # cancels from several threads at once
        cancelled = list(pool.map(mgr.cancel, reversed(eids)))
    took = time.monotonic() - t0
    assert cancelled == [1] * n
    assert len(hit_running) >= workers  # at least those queries were in PostgreSQL when cancelled
    assert took < 60, took  # each running query was cancelled, not waited for (20 s each)
    # nothing is left: tasks, events, task objects, running queries
    assert mgr.tasks() == [] and mgr.open_events() == [] and mgr.running() == 0
    assert _live_tasks() == 0
    assert _sleeping(pg) == []
    # connections: at most one per worker, all idle (released back to the workers)
    pids = mgr.connections()
    assert len(pids) <= workers and set(_states(pg, pids).values()) <= {"idle"}
    # threads: only the manager's own workers were ever added
    extra = [t for t in threading.enumerate() if t.ident not in threads_before]
    assert sorted(t.name for t in extra) == sorted(f"moirae-recall-{i}" for i in range(workers))
    # every task ended cancelled exactly once, with exactly one boundary per event
    ends = rec.ends()
    assert len(ends) == n and all(v == [EndReason.CANCELLED] for v in ends.values())
    assert sorted(o.eid for o in out.boundaries()) == sorted(eids)
    mgr.close()
    assert not any(t.is_alive() for t in extra)
    # connections closed: a closed client's backend leaves pg_stat_activity a moment later
    assert mgr.connections() == [] and wait_until(lambda: not _states(pg, pids), timeout=10)


def test_cancelling_some_events_never_fails_the_others(archive):
    # cancels land on busy connections that the next tasks then reuse
    rec = Recorder(archive, sql=SLEEPY, params=lambda e: {"s": 0.03, "host": "a"}, bound=SPAN)
    mgr = RecallManager(archive, max_concurrent=4)
    mgr.register(rec)
    eids = [f"c{i}" for i in range(80)]
    for i, eid in enumerate(eids):
        mgr.submit(event(eid, chunk=5 - i % 3), "rec")
    def cancel(eid):
        try:
            return mgr.cancel(eid)
        except UnknownEvent:  # it finished first
            return 0

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(cancel, eids[::2])) >= 20
    assert wait_until(lambda: not mgr.open_events(), timeout=60)
    views = {v.eid: v for v in mgr.tasks()}
    mgr.close()
    assert set(eids[1::2]) <= set(views)  # the ones not cancelled all ran ...
    assert [v.error for v in views.values() if v.error] == []  # ... and none failed
    assert all(v.state.value == "done" and v.chunks_done == 2 for v in views.values())
