"""Fixtures for the API tests: a real engine (no Spark queries started) over a real
PostgreSQL, with an archived stream, a Recall operator on the real Recall Manager, and
events in the real event log."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from archive.streams import StreamSpec
from moirae import Engine
from moirae.events import EventRecord
from recall.operator import Recall

T0 = datetime(2024, 3, 1, tzinfo=UTC)
HOURS = 3  # 18 chunks of 10 minutes


@pytest.fixture
def engine(pg, tmp_path, monkeypatch):
    """An engine whose archive holds ``metrics`` (3 h, 3 servers) and whose Recall
    operator ``hist`` suspends after every chunk (feedback_period=1), so tasks stay open
    until steered."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    monkeypatch.delenv("MOIRAE_API_TOKEN", raising=False)
    e = Engine.from_config(None, data_dir=str(tmp_path / "data"), postgres={"dsn": pg.dsn, "schema": pg.schema},
                           archive={"chunk_span": "10m"}, recall={"max_concurrent": 2})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"},
                                                indexes=[("sid",)]))
    n = HOURS * 360
    rng = np.random.default_rng(7)
    e.archiver.append("metrics", -1, pd.DataFrame({
        "ts": pd.date_range(T0, periods=n, freq="10s"), "sid": [f"s{i % 3}" for i in range(n)],
        "bw": rng.normal(50, 10, n)}), bulk=True)
    e.deploy.manager.register(Recall(
        "hist", "SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n FROM metrics h WHERE h.sid = :sid GROUP BY h.sid",
        store=e.archiver, feedback_period=1, feedback_timeout=600))
    yield e
    e.close()


def add_event(engine, eid: str, minutes: float, sid: str = "s0", submit: bool = True, event: str = "overload",
              context=None, surrounding=None) -> EventRecord:
    rec = EventRecord(event, eid, T0 + timedelta(minutes=minutes), {"sid": sid, "avg_bw": 91.5},
                      context=context or [{"sid": sid, "cpu": 97.0}], surrounding=surrounding or {})
    assert engine.deploy.events.add([rec]) == [rec]
    if submit:
        engine.deploy.manager.submit(rec.as_event(), ["hist"])
    return rec


def wait_for(cond, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def suspended(engine, eid: str) -> bool:
    tasks = engine.deploy.manager.tasks(eid)
    return bool(tasks) and all(t.state.value == "suspended" for t in tasks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
