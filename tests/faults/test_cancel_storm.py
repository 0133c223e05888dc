"""Cancel storm (issue 12 §6): 1,000 events with open recall tasks (two of them running a
slow history-query), all cancelled at once through ``Engine.cancel_many`` (goal: within
1 s, a target of ``bench.faults``), then 1,000 more cancelled one by one through
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
from fault_helpers import backends, record

from archive.streams import StreamSpec
from moirae import Engine
from moirae.events import EventRecord
from recall.operator import Recall

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
    mgr = engine.deploy.manager
    assert mgr.open_events() == [] and mgr.running() == 0
    assert not [v for v in mgr.tasks() if v.ended_at is None]
    assert _sleeping(dsn) == 0, "a cancelled history-query is still running in PostgreSQL"
    reopened = {r.eid for r in engine.deploy.events.open_events()} & set(eids)
    assert not reopened, f"{len(reopened)} cancelled events would be resumed after a restart"
    leaked_threads = {t.ident for t in threading.enumerate() if t.is_alive()} - during_threads
    settle = time.monotonic() + 5  # a closed backend leaves pg_stat_activity asynchronously
    while (after_backends := backends(dsn)) > during_backends and time.monotonic() < settle:
        time.sleep(0.1)
    assert not leaked_threads
    assert after_backends <= during_backends
    assert len(mgr.connections()) <= 2
    return {"leaked_threads": len(leaked_threads), "backends_after": after_backends, "resumable": len(reopened)}


def test_cancel_storm(private_pg, private_db, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    dsn = private_pg.dsn
    base_backends = backends(dsn)
    base_threads = {t.ident for t in threading.enumerate()}
    engine = Engine.from_config(None, data_dir=str(tmp_path / "data"),
                                postgres={"dsn": dsn, "schema": private_db.schema},
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

        eids = _open_storm(engine, "e", dsn)
        during_threads = {t.ident for t in threading.enumerate()}
        during_backends = backends(dsn)
        t0 = time.monotonic()
        counts = engine.cancel_many(eids)
        storm_s = time.monotonic() - t0
        assert counts == dict.fromkeys(eids, 1)
        bulk = _check_after(engine, eids, dsn, during_threads, during_backends)

        eids = _open_storm(engine, "f", dsn)
        t0 = time.monotonic()
        cancelled = sum(engine.cancel(eid) for eid in eids)
        single_s = time.monotonic() - t0
        assert cancelled == EVENTS
        single = _check_after(engine, eids, dsn, during_threads, during_backends)
    finally:
        engine.close()
    settle = time.monotonic() + 5
    while (closed_backends := backends(dsn)) > base_backends and time.monotonic() < settle:
        time.sleep(0.1)
    leaked_after_close = {t for t in threading.enumerate() if t.ident not in base_threads and t.is_alive()
                          and t.name.startswith("moirae")}
    assert closed_backends == base_backends, "the closed engine should leave no PostgreSQL session"
    assert not leaked_after_close, leaked_after_close
    # The 1 s goal is a target of bench.faults (reported, with the number, when missed);
    # here only a hang fails.
    assert storm_s < 120 and single_s < 120, f"cancelling {EVENTS} events took {storm_s:.2f}s / {single_s:.2f}s"
    record("cancel_storm", events=EVENTS, running_cancelled=2, storm_s=round(storm_s, 3), path="Engine.cancel_many",
           one_by_one_s=round(single_s, 3), leaked_threads=bulk["leaked_threads"] + single["leaked_threads"],
           backends_during=during_backends, backends_after=max(bulk["backends_after"], single["backends_after"]),
           resumable_after_restart=bulk["resumable"] + single["resumable"],
           backends_after_close_minus_before=closed_backends - base_backends,
           leaked_threads_after_close=len(leaked_after_close))
