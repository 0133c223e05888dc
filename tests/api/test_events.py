"""GET /api/events and /api/events/{eid} over a real engine state (PostgreSQL, the
real Recall Manager): filters and paging, 422 reasons, 404, and the event detail:
context, current results after revisions, similar past events, progress, boundary."""

from __future__ import annotations

from datetime import timedelta

import pytest

from moirae.api import create_app
from recall.api import Interval, Output, OutputKind
from tests.api.api_helpers import T0, add_event, suspended, wait_for
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres


@pytest.fixture
def client(engine):
    return api_client(create_app(engine))


def test_list_filters_and_pages(engine, client):
    for i in range(5):
        add_event(engine, f"a{i}", 10 * i, submit=False)
    add_event(engine, "b0", 25, submit=False, event="hot")
    body = client.get("/api/events").json()
    assert [e["eid"] for e in body["events"]] == ["a4", "a3", "b0", "a2", "a1", "a0"]  # newest first
    assert [e["eid"] for e in client.get("/api/events", params={"type": "hot"}).json()["events"]] == ["b0"]
    got = client.get("/api/events", params={"type": "overload", "since": (T0 + timedelta(minutes=10)).isoformat(),
                                            "until": "2024-03-01T00:30:00Z"}).json()["events"]
    assert [e["eid"] for e in got] == ["a2", "a1"]  # since inclusive, until exclusive
    page = client.get("/api/events", params={"limit": 2, "offset": 1}).json()
    assert [e["eid"] for e in page["events"]] == ["a3", "b0"] and page["count"] == 2
    assert client.get("/api/events", params={"since": "2024-03-01T00:25:00"}).json()["count"] == 3  # naive = UTC


BAD_PARAMS = [
    ({"since": "yesterday"}, "since: not an ISO-8601 time"),
    ({"until": "2024-13-01"}, "until: not an ISO-8601 time"),
    ({"since": "2024-03-02T00:00:00Z", "until": "2024-03-01T00:00:00Z"}, "is after until"),
    ({"limit": 0}, "greater than or equal to 1"),
    ({"limit": 5000}, "less than or equal to 1000"),
    ({"offset": -1}, "greater than or equal to 0"),
    ({"limit": "ten"}, "valid integer"),
]


def test_bad_list_parameters_are_422_with_a_reason(client):
    for params, needle in BAD_PARAMS:
        res = client.get("/api/events", params=params)
        assert res.status_code == 422, params
        assert needle in str(res.json()["detail"]), (params, res.json())


def test_unknown_event_is_404(client):
    res = client.get("/api/events/nope")
    assert res.status_code == 404
    assert "nope" in res.json()["detail"]


def test_detail_has_context_results_and_progress_of_a_live_recall(engine, client):
    add_event(engine, "ev1", 175, context=[{"sid": "s0", "cpu": 97.0}, {"sid": "s0", "cpu": 93.0}])
    wait_for(lambda: suspended(engine, "ev1"), what="the first chunk")
    engine.deploy.results.flush()
    d = client.get("/api/events/ev1").json()
    assert (d["event"], d["eid"], d["attrs"]["sid"]) == ("overload", "ev1", "s0")
    assert d["context"] == [{"sid": "s0", "cpu": 97.0}, {"sid": "s0", "cpu": 93.0}]
    (task,) = d["progress"]
    assert (task["operator"], task["state"], task["chunks_done"], task["chunks_total"], task["tickets"]) == \
        ("hist", "suspended", 1, 18, 100)
    res = d["results"]["hist"]
    assert res["similarity"] is False
    (cur,) = res["current"]
    assert cur["row"]["sid"] == "s0" and cur["row"]["n"] == 20  # one 10-minute chunk, 1 row in 3 every 10 s
    assert res["covered"] == ["2024-03-01T02:50:00+00:00", "2024-03-01T03:00:00+00:00"]
    assert d["boundary"] is None and d["similar"] == [] and d["engine_running"] is True


def test_detail_applies_revisions_by_key_and_keeps_history(engine, client):
    rec = add_event(engine, "ev2", 60, submit=False)
    iv = Interval(T0, T0 + timedelta(minutes=10))
    seq = [(OutputKind.INSERT, "k1", {"v": 1}), (OutputKind.INSERT, "k2", {"v": 2}),
           (OutputKind.UPDATE, "k1", {"v": 10}), (OutputKind.DELETE, "k2", {"v": 2}),
           (OutputKind.INSERT, "k3", {"v": 3})]
    for i, (kind, key, row) in enumerate(seq):
        engine.deploy.results.append(Output("agg", "ev2", rec.ts, kind, i, key, row, iv))
    engine.deploy.results.append(Output("agg", "ev2", rec.ts, OutputKind.BOUNDARY, 5, "",
                                        {"tasks": 1, "ended": {"r9": "done"}}, None))
    engine.deploy.results.flush()
    d = client.get("/api/events/ev2").json()
    res = d["results"]["agg"]
    assert {c["key"]: c["row"]["v"] for c in res["current"]} == {"k1": 10, "k3": 3}
    assert [h["kind"] for h in res["history"]] == ["insert", "insert", "update", "delete", "insert"]
    assert res["covered"] == [T0.isoformat(), (T0 + timedelta(minutes=10)).isoformat()]
    assert d["boundary"] == {"seq": 5, "tasks": 1, "ended": {"r9": "done"}}


def test_similar_past_events_with_scores_contexts_and_resolutions(engine, client):
    add_event(engine, "old1", 10, submit=False, context=[{"cpu": 99.0}],
              surrounding={"tickets": [{"resolution": "rebooted"}]})
    add_event(engine, "old2", 20, submit=False, context=[{"cpu": 80.0}])
    add_event(engine, "old3", 30, submit=False, context=[{"cpu": 85.0}])
    new = add_event(engine, "new", 90, submit=False)
    out = [(OutputKind.INSERT, "old2", {"past_eid": "old2", "score": 0.4}),
           (OutputKind.INSERT, "old1", {"past_eid": "old1", "score": 0.9}),
           (OutputKind.INSERT, "old3", {"past_eid": "old3", "score": 0.7, "context": [{"cpu": 85.0, "x": 1}],
                                        "surrounding": {"tickets": [{"resolution": "ignored"}]}}),
           (OutputKind.DELETE, "old2", {"past_eid": "old2", "score": 0.4}),  # displaced by a better one
           (OutputKind.INSERT, "__status__", {"status": "done", "k": 2, "found": 2})]
    for i, (kind, key, row) in enumerate(out):
        engine.deploy.results.append(Output("sim", "new", new.ts, kind, i, key, row, None))
    engine.deploy.results.flush()
    d = client.get("/api/events/new").json()
    assert d["results"]["sim"]["similarity"] is True
    assert [(s["eid"], s["score"]) for s in d["similar"]] == [("old1", 0.9), ("old3", 0.7)]
    first, second = d["similar"]
    assert first["context"] == [{"cpu": 99.0}]  # from the past event's record
    assert first["resolution"] == {"tickets": [{"resolution": "rebooted"}]}  # its surrounding information
    assert first["ts"] == (T0 + timedelta(minutes=10)).isoformat()
    assert second["context"] == [{"cpu": 85.0, "x": 1}]  # from the row
    assert second["resolution"] == {"tickets": [{"resolution": "ignored"}]}
    assert {"key": "__status__", "row": {"status": "done", "k": 2, "found": 2}} in d["results"]["sim"]["current"]


def test_chunks_and_tasks(engine, client):
    add_event(engine, "ev3", 100)
    wait_for(lambda: suspended(engine, "ev3"), what="the first chunk")
    chunks = client.get("/api/archive/chunks").json()
    assert chunks["count"] == 18 and {c["stream"] for c in chunks["chunks"]} == {"metrics"}
    assert sum(c["rows"] for c in chunks["chunks"]) == 1080
    assert client.get("/api/archive/chunks", params={"stream": "nope"}).status_code == 404
    tasks = client.get("/api/scheduler/tasks").json()
    assert tasks["engine_running"] is True
    assert [(t["eid"], t["state"], t["tickets"]) for t in tasks["tasks"]] == [("ev3", "suspended", 100)]
    assert tasks["open_events"] == ["ev3"]
