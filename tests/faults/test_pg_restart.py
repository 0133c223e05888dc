"""PostgreSQL restart mid-stream: the engine's private embedded server is
stopped and started while micro-batches are being archived (the sink's write path:
Arrow batches appended with their batch ids), recall tasks are running history-queries
and events are logged. The engine retries with backoff, reports the outage in
``archive status`` and ``/api/status``, and ends with every row archived once."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from archive.streams import StreamSpec
from moirae.api import create_app
from moirae.ingest.events import EventRecord
from moirae.read.status_view import render_status
from recall.operator import Recall
from tests.api.api_helpers import client as api_client
from tests.engine_factory import make_engine
from tests.faults.fault_helpers import measuring

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.slow]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
BATCHES, ROWS = 60, 200
SLOW = ("SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n, max(pg_sleep(0.001)::text) AS slept "
        "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def _batch(i: int) -> pa.Table:
    ts = pd.date_range(T0 + timedelta(seconds=i * ROWS), periods=ROWS, freq="1s")
    rng = np.random.default_rng(i)
    return pa.Table.from_pandas(pd.DataFrame({"ts": ts, "sid": [f"s{j % 4}" for j in range(ROWS)],
                                              "bw": rng.normal(50, 10, ROWS)}), preserve_index=False)


def test_postgres_restart_mid_stream(private_pg, private_db, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    monkeypatch.setenv("MOIRAE_PG_RETRY_SECONDS", "90")
    engine = make_engine((private_pg.dsn, private_db.schema), tmp_path / "data",
                         archive={"chunk_span": "10m", "chunk_target_rows": 0}, recall={"max_concurrent": 2})
    try:
        engine.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"},
                                                         indexes=[("sid",)]))
        engine.archiver.append("metrics", 0, _batch(0))
        engine.deploy.manager.register(Recall("hist", SLOW, store=engine.archiver, feedback_period=None,
                                              bound=timedelta(days=1)))
        errors: list[BaseException] = []
        appended: list[float] = []

        def stream() -> None:  # the sink: one micro-batch every 50 ms
            try:
                for i in range(1, BATCHES):
                    engine.archiver.append("metrics", i, _batch(i))
                    appended.append(time.monotonic())
                    if i % 10 == 0:
                        rec = EventRecord("overload", f"e{i}", T0 + timedelta(seconds=i * ROWS), {"sid": "s1"})
                        engine.deploy.events.add([rec])
                        engine.deploy.manager.submit(rec.as_event(), ["hist"])
                    time.sleep(0.05)
            except BaseException as exc:
                errors.append(exc)

        writer = threading.Thread(target=stream)
        writer.start()
        with measuring("pg_restart") as figures:
            _restart_mid_stream(engine, private_pg, private_db, writer, appended, errors, figures)
    finally:
        engine.close()


def _restart_mid_stream(engine, private_pg, private_db, writer, appended, errors, figures: dict) -> None:
    """Stop and start the server while ``writer`` streams; fill ``figures`` with what was
    archived, retried and reported, then assert on them."""
    while len(appended) < 15:
        time.sleep(0.02)
    t_stop = time.monotonic()
    private_pg.stop()
    time.sleep(2.0)
    down_state = engine.db.health.report()["state"]
    down_status = engine.db.health.report()["current"]
    private_pg.start()
    t_up = time.monotonic()
    writer.join(timeout=180)
    first_after = next((t for t in appended if t > t_up), None)
    figures.update(server_down_s=round(t_up - t_stop, 2), retries_while_down=down_status["retries"],
                   state_while_down=down_state, writer_errors=[repr(e)[:200] for e in errors],
                   resumed_after_s=None if first_after is None else round(first_after - t_up, 2))
    assert down_state == "down", "the outage should be noticed while it lasts"
    assert not writer.is_alive() and not errors, errors

    # 0 lost, 0 duplicated
    with private_db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT _sid) FROM metrics")
        total, distinct = cur.fetchone()
        cur.execute("SELECT count(*) FROM moirae_batches WHERE stream = 'metrics'")
        batches = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM moirae_events")
        events = cur.fetchone()[0]
    # recall tasks ride through: every event's tasks end done, none failed
    deadline = time.monotonic() + 60
    while engine.deploy.manager.open_events() and time.monotonic() < deadline:
        time.sleep(0.1)
    failed = [v for v in engine.deploy.manager.tasks() if v.error]
    # reported: archive status (text and JSON) and the API
    status = engine.archiver.status()
    outages = status["database"]["outages"]
    api = api_client(create_app(engine)).get("/api/status").json()
    api_outages = api["archive"]["database"]["outages"]
    figures.update(rows=int(total), rows_expected=BATCHES * ROWS, lost=BATCHES * ROWS - int(distinct),
                   duplicated=int(total - distinct), batches=int(batches), events=int(events),
                   failed_tasks=len(failed), retries=outages[0]["retries"] if outages else 0,
                   reported_in=[where for where, seen in (("archive status", bool(outages)),
                                                           ("/api/status", bool(api_outages))) if seen])
    assert total == distinct == BATCHES * ROWS and batches == BATCHES
    assert events == (BATCHES - 1) // 10
    assert not failed, failed
    assert not engine.deploy.manager.open_events(), _stuck(engine, private_pg.dsn)
    assert status["database"]["state"] == "up" and len(outages) >= 1 and outages[0]["retries"] >= 1
    assert "PostgreSQL outages: " in render_status(status)
    assert api_outages[0]["retries"] >= 1


def _stuck(engine, dsn: str) -> str:
    """What an open task waits for: the recall threads' stacks and the server's sessions."""
    import sys
    import traceback

    import psycopg2

    out = [str([(v.eid, v.state, v.error) for v in engine.deploy.manager.tasks() if v.ended_at is None])]
    frames = sys._current_frames()
    for t in threading.enumerate():
        if t.name.startswith("moirae-recall") and t.ident in frames:
            out.append(f"{t.name}:\n" + "".join(traceback.format_stack(frames[t.ident])[-6:]))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pid, state, wait_event_type, wait_event, left(query, 120) FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
        out += [str(r) for r in cur.fetchall()]
    return "\n".join(out)
