"""The console: the page itself, and ``moirae console``'s read-only view over the
database of an engine that is not running in this process (events, results, chunks;
live updates by tailing the tables; steering is 409)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from moirae.api import ReadOnlyEngine, create_app
from moirae.read.readonly import DbTail
from recall.api import Output, OutputKind
from tests.api.api_helpers import add_event, suspended, wait_for
from tests.api.api_helpers import client as api_client

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


def test_the_page_is_served_and_uses_the_api(engine):
    page = api_client(create_app(engine)).get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for needle in ("new EventSource('/api/stream')", "/api/events/", "'cancel'", "'accelerate'", "Similar past incidents", "/api/incidents"):
        assert needle in page.text


def test_read_only_view_over_the_database(engine):
    add_event(engine, "ev1", 170)
    wait_for(lambda: suspended(engine, "ev1"), what="suspended")
    engine.deploy.results.flush()
    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        client = api_client(create_app(ro))
        assert [e["eid"] for e in client.get("/api/events").json()["events"]] == ["ev1"]
        d = client.get("/api/events/ev1").json()
        assert d["engine_running"] is False and d["progress"] == []
        assert d["results"]["hist"]["current"][0]["row"]["n"] == 20
        assert client.get("/api/archive/chunks").json()["count"] == 18
        assert client.get("/api/scheduler/tasks").json() == {"engine_running": False, "tasks": [],
                                                             "running_queries": 0}
        for path in ("cancel", "accelerate"):
            res = client.post(f"/api/events/ev1/{path}")
            assert res.status_code == 409 and "no engine is running" in res.json()["detail"]
        assert client.post("/api/events/nope/cancel").status_code == 404
        assert [t.tickets for t in engine.deploy.manager.tasks("ev1")] == [100]
    finally:
        ro.close()


def test_tail_publishes_rows_written_by_another_engine(engine):
    add_event(engine, "before", 100, submit=False)
    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        tail = DbTail(ro.db, ro.bus, incidents=ro.incidents)
        sub = ro.bus.subscribe()
        assert tail.poll() == 0  # what was there before is not news
        rec = add_event(engine, "after", 110, sid="s2", submit=False)  # another server: its own incident
        engine.deploy.results.append(Output("hist", "after", rec.ts, OutputKind.INSERT, 0, "k", {"v": 1}, None))
        engine.deploy.results.flush()
        assert tail.poll() == 3
        ev, out, inc = list(sub.drain())
        assert ev["type"] == "event" and ev["eid"] == "after"
        assert (out.eid, out.kind, dict(out.row)) == ("after", OutputKind.INSERT, {"v": 1})
        assert (inc["type"], inc["id"], inc["status"]) == ("incident", "after", "open")
        assert tail.poll() == 0  # each once
        engine.deploy.incidents.acknowledge("after", "ann")  # written by the engine's process
        assert tail.poll() == 1 and next(iter(sub.drain()))["status"] == "acknowledged"
    finally:
        ro.close()


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # a subprocess: one backend is enough
def test_console_command_serves_the_api_read_only(engine, tmp_path):
    add_event(engine, "ev1", 170, submit=False)
    s = engine.settings
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"data_dir": str(s.data_dir), "postgres": {"dsn": s.postgres.dsn or engine.db.dsn,
                                                                         "schema": s.postgres.schema}}))
    env = {k: v for k, v in os.environ.items() if k != "MOIRAE_PG_DSN"}
    proc = subprocess.Popen([sys.executable, "-m", "moirae.cli", "console", "--config", str(cfg), "--port", "0",
                             "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"console on (http://\S+)/ ", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        with httpx.Client(base_url=m.group(1), timeout=10) as client:
            assert [e["eid"] for e in client.get("/api/events").json()["events"]] == ["ev1"]
            assert client.post("/api/events/ev1/cancel").status_code == 401  # mutations need the token
            local = {"Authorization": f"Bearer {(Path(s.data_dir) / 'api.token').read_text().strip()}"}
            assert client.post("/api/events/ev1/cancel", headers=local).status_code == 409
            assert "EventSource" in client.get("/").text
    finally:
        proc.terminate()
        proc.wait(30)
