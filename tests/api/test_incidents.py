"""The incident routes on a real engine and PostgreSQL: events recorded in the event
log become incidents (one per run of consecutive windows of a key), listed newest
first with filters and paging; the detail carries the norm, the current value in sd
and the archived series; acknowledge / resolve follow the token rule, refuse bad input
with a 422 in words, and a resolution shows in a later event's similar list."""

from __future__ import annotations

import pytest

from moirae.api import create_app
from recall.api import Output, OutputKind
from tests.api.api_helpers import add_event
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres


def configure(engine):
    engine.deploy.incidents.configure("overload", keys="sid", window=__import__("datetime").timedelta(minutes=5),
                                      metric="avg_bw", threshold=80.0, series=("metrics", "bw"), norm="hist")


def test_incidents_list_detail_and_actions(engine):
    configure(engine)
    add_event(engine, "a1", 20, sid="s0", submit=False)
    add_event(engine, "a2", 25, sid="s0", submit=False)
    add_event(engine, "b1", 30, sid="s1", submit=False)
    add_event(engine, "a3", 90, sid="s0", submit=False)
    engine.deploy.results.append(Output("hist", "a1", add_event.__globals__["T0"], OutputKind.INSERT, 1, "s0",
                                        {"sid": "s0", "mean_bw": 50.0, "sd_bw": 10.0, "n": 99}, None))
    engine.deploy.incidents.on_output(Output("hist", "a2", add_event.__globals__["T0"], OutputKind.INSERT, 1, "s0",
                                             {"sid": "s0", "mean_bw": 50.0, "sd_bw": 10.0, "n": 99}, None))
    client = api_client(create_app(engine))
    r = client.get("/api/incidents").json()
    assert [i["id"] for i in r["incidents"]] == ["a3", "b1", "a1"] and r["total"] == 3
    assert client.get("/api/incidents?limit=1&offset=1").json()["incidents"][0]["id"] == "b1"
    assert client.get("/api/incidents?type=other").json()["total"] == 0
    bad = client.get("/api/incidents?status=bogus")
    assert bad.status_code == 422
    d = client.get("/api/incidents/a1").json()
    assert d["alerts"] == 2 and [e["eid"] for e in d["events"]] == ["a1", "a2"]
    assert d["severity"] == pytest.approx(4.15) and d["severity_label"] == "major"
    assert d["norm"]["mean"] == 50.0 and d["current"]["z"] == pytest.approx(4.15)
    assert d["threshold"] == 80.0 and len(d["series"]["points"]) == 81  # s0 only (every 30 s) up to 15 min after
    assert client.get("/api/incidents/nope").status_code == 404
    assert client.post("/api/incidents/a1/acknowledge", json={"by": "ann"}).json()["status"] == "acknowledged"
    res = client.post("/api/incidents/a1/resolve", json={})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"][-1] == "note"
    done = client.post("/api/incidents/a1/resolve", json={"note": "killed process rsync", "by": "bob"}).json()
    assert done["status"] == "resolved" and done["resolution"] == "killed process rsync"
    assert client.get("/api/incidents?status=resolved").json()["total"] == 1
    # a later event whose similar list names a2 (an event of incident a1) shows the recorded resolution
    add_event(engine, "c1", 150, sid="s2", submit=False)
    engine.deploy.results.append(Output("sim", "c1", add_event.__globals__["T0"], OutputKind.INSERT, 1, "a2",
                                        {"past_eid": "a2", "score": 0.8, "surrounding": {}}, None))
    similar = client.get("/api/events/c1").json()["similar"]
    assert similar[0]["resolution"] == "killed process rsync" and similar[0]["resolution_recorded"] is True
    summary = client.get("/api/archive/summary").json()
    assert summary["tiers"][0]["stream"] == "metrics" and sum(t["chunks"] for t in summary["tiers"]) == 18


def test_incident_actions_need_the_token(engine):
    add_event(engine, "a1", 20, submit=False)
    client = api_client(create_app(engine, token="s3cret"), token=False)
    assert client.post("/api/incidents/a1/acknowledge").status_code == 401
    ok = client.post("/api/incidents/a1/acknowledge", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["acknowledged_by"] == "anonymous"
    assert client.get("/api/incidents").json()["incidents"][0]["status"] == "acknowledged"
