"""Cancel storm (issue 12 §6): 1,000 events with open recall tasks (two of them running a
slow history-query), all cancelled through ``Engine.cancel`` (goal: within 1 s, a target of ``bench.faults``). Afterwards no
thread, connection or PostgreSQL backend is left over: the worker threads and their
connections are the same as before the storm, and ``pg_stat_activity`` of the engine's
private server shows no extra session (and none at all once the engine is closed)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from fault_helpers import backends, record

from archive.streams import StreamSpec
from moirae import Engine
from recall.operator import Recall

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.slow]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
EVENTS = 1000
SQL = ("SELECT h.sid, count(*) AS n, max(pg_sleep(CASE WHEN :slow THEN 30 ELSE 0 END)::text) AS s "
       "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def test_cancel_storm(private_pg, private_db, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    base_backends = backends(private_pg.dsn)
    base_threads = {t.ident for t in threading.enumerate()}
    engine = Engine.from_config(None, data_dir=str(tmp_path / "data"),
                                postgres={"dsn": private_pg.dsn, "schema": private_db.schema},
                                archive={"chunk_span": "10m"}, recall={"max_concurrent": 2})
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
        for i in range(EVENTS):
            mgr.submit({"eid": f"e{i}", "ts": T0 + timedelta(hours=3), "sid": f"s{i % 3}", "slow": i < 2},
                       ["hist"])
        deadline = time.monotonic() + 60
        while mgr.running() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mgr.running() == 2, "the two slow history-queries should be running"
        for i in range(10):  # warm-up: the results writer opens its one connection on the first boundary
            mgr.submit({"eid": f"w{i}", "ts": T0 + timedelta(hours=3), "sid": "s0", "slow": False}, ["hist"])
            engine.cancel(f"w{i}")
        time.sleep(0.5)
        assert len(mgr.open_events()) == EVENTS
        during_threads = {t.ident for t in threading.enumerate()}
        during_backends = backends(private_pg.dsn)

        t0 = time.monotonic()
        for i in range(EVENTS):
            engine.cancel(f"e{i}")
        storm_s = time.monotonic() - t0

        assert mgr.open_events() == [] and mgr.running() == 0
        assert not [v for v in mgr.tasks() if v.ended_at is None]
        after_threads = {t.ident for t in threading.enumerate() if t.is_alive()}
        leaked_threads = after_threads - during_threads
        settle = time.monotonic() + 5  # a closed backend leaves pg_stat_activity asynchronously
        while (after_backends := backends(private_pg.dsn)) > during_backends and time.monotonic() < settle:
            time.sleep(0.1)
        assert not leaked_threads
        assert after_backends <= during_backends
        assert len(mgr.connections()) <= 2
    finally:
        engine.close()
    settle = time.monotonic() + 5
    while (closed_backends := backends(private_pg.dsn)) > base_backends and time.monotonic() < settle:
        time.sleep(0.1)
    leaked_after_close = {t for t in threading.enumerate() if t.ident not in base_threads and t.is_alive()
                          and t.name.startswith("moirae")}
    assert closed_backends == base_backends, "the closed engine should leave no PostgreSQL session"
    assert not leaked_after_close, leaked_after_close
    # The 1 s goal is a target of bench.faults (reported, with the number, when missed):
    # each cancel's boundary is a committed update of the event log. Here only a hang fails.
    assert storm_s < 120, f"cancelling {EVENTS} events took {storm_s:.2f}s"
    record("cancel_storm", events=EVENTS, running_cancelled=2, storm_s=round(storm_s, 3),
           leaked_threads=len(leaked_threads), backends_during=during_backends, backends_after=after_backends,
           backends_after_close_minus_before=closed_backends - base_backends,
           leaked_threads_after_close=len(leaked_after_close))
