"""Cancel storm: 1,000 events with open recall tasks (two of them running a
slow history-query), all cancelled at once through ``Engine.cancel_many`` (goal: within
1 s, a target of ``bench.engine.faults``), then 1,000 more cancelled one by one through
``Engine.cancel`` (the per-event path, recorded for comparison).

After each storm: no task is open or running; the slow queries are gone from the server
(``pg_stat_activity`` shows no active ``pg_sleep``: their SQL was cancelled, not left to
finish); every cancelled event is marked ended in the event log, so a restart does not
resume its recall (``DeployManager.start`` resumes exactly ``EventLog.open_events()``); no
thread, connection or PostgreSQL backend is left over (the worker threads and their
connections are the same as before the storm, and the engine's private server shows no
extra session, and none at all once the engine is closed)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import psycopg2
import pytest

from archive.streams import StreamSpec
from moirae.ingest.events import EventRecord
from recall.operator import Recall
from tests.engine_factory import make_engine
from tests.faults.fault_helpers import backends, measuring

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.slow]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
EVENTS = 1000
SQL = ("SELECT h.sid, count(*) AS n, max(pg_sleep(CASE WHEN :slow THEN 30 ELSE 0 END)::text) AS s "
       "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def _sleeping(dsn: str) -> int:
    """Sessions of the server running the slow history-query right now."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                        "AND state = 'active' AND query ILIKE '%pg_sleep%'")
            return cur.fetchone()[0]
    finally:
        conn.close()


def _open_storm(engine, prefix: str, dsn: str) -> list[str]:
    """EVENTS events in the event log with one open recall task each, the first two
    running a 30 s history-query; returns their ids."""
    mgr = engine.deploy.manager
    eids = [f"{prefix}{i}" for i in range(EVENTS)]
    events = [{"eid": eid, "ts": T0 + timedelta(hours=3), "sid": f"s{i % 3}", "slow": i < 2}
              for i, eid in enumerate(eids)]
    engine.deploy.events.add([EventRecord("storm", e["eid"], e["ts"], {"sid": e["sid"]}) for e in events])
    for e in events:
        mgr.submit(e, ["hist"])
    deadline = time.monotonic() + 60
    while (mgr.running() < 2 or _sleeping(dsn) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mgr.running() == 2 and _sleeping(dsn) == 2, "the two slow history-queries should be running"
    time.sleep(0.5)
    assert set(eids) <= set(mgr.open_events())
    return eids


def _check_after(engine, eids: list[str], dsn: str, during_threads: set, during_backends: int) -> dict:
    """What a storm left behind: its figures, and under ``problems`` what should not be."""
    mgr = engine.deploy.manager
    open_events, running = mgr.open_events(), mgr.running()
    unended = [v for v in mgr.tasks() if v.ended_at is None]
    sleeping = _sleeping(dsn)
    reopened = {r.eid for r in engine.deploy.events.open_events()} & set(eids)
    leaked_threads = {t.ident for t in threading.enumerate() if t.is_alive()} - during_threads
    settle = time.monotonic() + 5  # a closed backend leaves pg_stat_activity asynchronously
    while (after_backends := backends(dsn)) > during_backends and time.monotonic() < settle:
        time.sleep(0.1)
    connections = len(mgr.connections())
    problems = [msg for bad, msg in (
        (open_events or running, f"{len(open_events)} events still open, {running} tasks running"),
        (unended, f"{len(unended)} tasks not ended"),
        (sleeping, "a cancelled history-query is still running in PostgreSQL"),
        (reopened, f"{len(reopened)} cancelled events would be resumed after a restart"),
        (leaked_threads, f"{len(leaked_threads)} threads leaked"),
        (after_backends > during_backends, f"{after_backends} backends after the storm, {during_backends} during"),
        (connections > 2, f"{connections} recall connections")) if bad]
    return {"leaked_threads": len(leaked_threads), "backends_after": after_backends, "resumable": len(reopened),
            "problems": problems}


def test_cancel_storm(private_pg, private_db, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    dsn = private_pg.dsn
    base_backends = backends(dsn)
    base_threads = {t.ident for t in threading.enumerate()}
    engine = make_engine((dsn, private_db.schema), tmp_path / "data",
                         archive={"chunk_span": "10m", "chunk_target_rows": 0}, recall={"max_concurrent": 2})
    try:
        engine.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"},
                                                         indexes=[("sid",)]))
        n = 1080
        engine.archiver.append("metrics", -1, pd.DataFrame({
            "ts": pd.date_range(T0, periods=n, freq="10s"), "sid": [f"s{i % 3}" for i in range(n)],
            "bw": np.random.default_rng(3).normal(50, 10, n)}), bulk=True)
        # unbounded and suspending after each chunk: a task stays open until steered
        engine.deploy.manager.register(Recall("hist", SQL, store=engine.archiver, feedback_period=1,
                                              feedback_timeout=600))
        mgr = engine.deploy.manager
        for i in range(10):  # warm-up: the results writer and the event log open their connection once
            mgr.submit({"eid": f"w{i}", "ts": T0 + timedelta(hours=3), "sid": "s0", "slow": False}, ["hist"])
            engine.cancel(f"w{i}")

        with measuring("cancel_storm") as figures:
            _storms(engine, dsn, figures)
            _closed(engine, dsn, base_backends, base_threads, figures)
    finally:
        engine.close()


def _storms(engine, dsn: str, figures: dict) -> None:
    """Cancel EVENTS open events at once, then EVENTS more one by one; fill ``figures``,
    then assert that each storm cancelled them all and left nothing behind."""
    eids = _open_storm(engine, "e", dsn)
    during_threads = {t.ident for t in threading.enumerate()}
    during_backends = backends(dsn)
    t0 = time.monotonic()
    counts = engine.cancel_many(eids)
    storm_s = time.monotonic() - t0
    bulk = _check_after(engine, eids, dsn, during_threads, during_backends)
    figures.update(events=EVENTS, running_cancelled=2, storm_s=round(storm_s, 3), path="Engine.cancel_many",
                   backends_during=during_backends, bulk_cancelled=sum(counts.values()))

    eids_one = _open_storm(engine, "f", dsn)
    t0 = time.monotonic()
    cancelled = sum(engine.cancel(eid) for eid in eids_one)
    single_s = time.monotonic() - t0
    single = _check_after(engine, eids_one, dsn, during_threads, during_backends)
    figures.update(one_by_one_s=round(single_s, 3), one_by_one_cancelled=cancelled,
                   leaked_threads=bulk["leaked_threads"] + single["leaked_threads"],
                   backends_after=max(bulk["backends_after"], single["backends_after"]),
                   resumable_after_restart=bulk["resumable"] + single["resumable"],
                   problems=bulk["problems"] + single["problems"])
    assert counts == dict.fromkeys(eids, 1)
    assert cancelled == EVENTS
    assert not figures["problems"], figures["problems"]
    # The 1 s goal is a target of bench.engine.faults (reported, with the number, when missed);
    # here only a hang fails.
    assert storm_s < 120 and single_s < 120, f"cancelling {EVENTS} events took {storm_s:.2f}s / {single_s:.2f}s"


def _closed(engine, dsn: str, base_backends: int, base_threads: set, figures: dict) -> None:
    """Close the engine: no PostgreSQL session and no moirae thread may outlive it."""
    engine.close()
    settle = time.monotonic() + 5
    while (closed_backends := backends(dsn)) > base_backends and time.monotonic() < settle:
        time.sleep(0.1)
    leaked_after_close = {t for t in threading.enumerate() if t.ident not in base_threads and t.is_alive()
                          and t.name.startswith("moirae")}
    figures.update(backends_after_close_minus_before=closed_backends - base_backends,
                   leaked_threads_after_close=len(leaked_after_close))
    assert closed_backends == base_backends, "the closed engine should leave no PostgreSQL session"
    assert not leaked_after_close, leaked_after_close
