"""Cancel and accelerate through HTTP change the Recall Manager's and the scheduler's
state as asked (M 4.4), and nothing else; bad bodies are 422 and change nothing;
unknown events are 404."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moirae.api import create_app
from tests.api.api_helpers import add_event, suspended, wait_for
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres
_ids = itertools.count()


@pytest.fixture
def client(engine):
    return api_client(create_app(engine))


def _open(engine, *eids):
    for i, eid in enumerate(eids):
        add_event(engine, eid, 170 - i)
    for eid in eids:
        wait_for(lambda eid=eid: suspended(engine, eid), what=f"{eid} suspended")


def _tickets(engine, eid):
    return [t.tickets for t in engine.deploy.manager.tasks(eid)]


def test_accelerate_adds_tickets_to_that_event_only(engine, client):
    _open(engine, "a", "b")
    res = client.post("/api/events/a/accelerate", json={"tickets": 250})
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["changed"] is True and body["accelerated"] == 1
    assert [(t["tickets_before"], t["tickets_after"]) for t in body["tasks"]] == [(100, 350)]
    assert "accelerated 1 recall task" in body["message"]
    wait_for(lambda: suspended(engine, "a"), what="a suspended again")  # accelerate counted as feedback
    (ta,) = engine.deploy.manager.tasks("a")
    assert ta.tickets == 350 and ta.chunks_done == 2  # resumed: one more chunk, then suspended again
    (tb,) = engine.deploy.manager.tasks("b")
    assert tb.tickets == 100 and tb.chunks_done == 1


def test_accelerate_without_body_adds_the_default(engine, client):
    _open(engine, "a")
    assert client.post("/api/events/a/accelerate").json()["tickets"] == 100
    wait_for(lambda: _tickets(engine, "a") == [200], what="200 tickets")


def test_cancel_ends_every_task_of_that_event_only(engine, client):
    _open(engine, "a", "b")
    body = client.post("/api/events/a/cancel").json()
    assert body["changed"] is True and body["cancelled"] == 1 and len(body["tasks"]) == 1
    assert engine.deploy.manager.tasks("a") == []  # cancelled tasks leave nothing behind
    assert engine.deploy.manager.open_events() == ["b"]
    assert _tickets(engine, "b") == [100]
    again = client.post("/api/events/a/cancel").json()  # nothing left to cancel
    assert again["changed"] is False and again["cancelled"] == 0 and "nothing to cancel" in again["message"]
    assert client.post("/api/events/a/accelerate").json()["changed"] is False
    engine.deploy.results.flush()
    detail = client.get("/api/events/a").json()
    assert detail["boundary"]["ended"] == {body["tasks"][0]: "cancelled"}


@pytest.mark.parametrize("path", ["cancel", "accelerate"])
def test_steering_an_unknown_event_is_404(client, path):
    res = client.post(f"/api/events/nope/{path}")
    assert res.status_code == 404 and "nope" in res.json()["detail"]


BAD_BODIES = [{"tickets": 0}, {"tickets": -5}, {"tickets": "many"}, {"tickets": 2.5}, {"tickets": True},
              {"tickets": 10**7}, {"tickets": 5, "extra": 1}, [5]]


def test_bad_accelerate_bodies_are_422_and_change_nothing(engine, client):
    _open(engine, "a")
    for body in BAD_BODIES:
        res = client.post("/api/events/a/accelerate", json=body)
        assert res.status_code == 422, (body, res.text)
        assert res.json()["detail"]
    assert _tickets(engine, "a") == [100]


def test_malformed_json_is_422(engine, client):
    _open(engine, "a")
    res = client.post("/api/events/a/accelerate", content=b"{tickets: 5", headers={"Content-Type": "application/json"})
    assert res.status_code == 422
    assert _tickets(engine, "a") == [100]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amounts=st.lists(st.integers(1, 1000), min_size=1, max_size=4))
def test_tickets_add_up_over_accelerations(engine, client, amounts):
    eid = f"p{next(_ids)}"
    add_event(engine, eid, 170)
    wait_for(lambda: suspended(engine, eid), what="suspended")
    before = _tickets(engine, eid)[0]
    for n in amounts:
        body = client.post(f"/api/events/{eid}/accelerate", json={"tickets": n}).json()
        assert body["tasks"][0]["tickets_after"] - body["tasks"][0]["tickets_before"] == n
    wait_for(lambda: _tickets(engine, eid) == [before + sum(amounts)], what="tickets summed")
    client.post(f"/api/events/{eid}/cancel")


def test_bulk_cancel_ends_the_named_events_only_in_one_request(engine, client):
    _open(engine, "a", "b", "c")
    res = client.post("/api/events/cancel", json={"eids": ["a", "c", "a"]})
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["events"] == {"a": 1, "c": 1} and body["cancelled"] == 2 and body["changed"] is True
    assert body["not_open"] == [] and "cancelled 2 recall task(s) of 2 event(s)" in body["message"]
    assert engine.deploy.manager.open_events() == ["b"]
    assert {r.eid for r in engine.deploy.events.open_events()} >= {"b"}
    assert not {"a", "c"} & {r.eid for r in engine.deploy.events.open_events()}, "a restart would resume them"
    again = client.post("/api/events/cancel", json={"eids": ["a", "b"]}).json()
    assert again["events"] == {"b": 1} and again["not_open"] == ["a"]


@pytest.mark.parametrize("body", [{"eids": []}, {"eids": "a"}, {"eids": [1]}, {"eids": [""]}, {"eid": ["a"]},
                                  {"eids": ["a"], "extra": 1}, ["a"], {"eids": ["a"] * 10_001}])
def test_bad_bulk_cancel_bodies_are_422_and_change_nothing(engine, client, body):
    _open(engine, "a")
    res = client.post("/api/events/cancel", json=body)
    assert res.status_code == 422, (str(body)[:80], res.text[:300])
    assert engine.deploy.manager.open_events() == ["a"]


def test_bulk_cancel_with_an_unknown_event_is_404_naming_it_and_cancels_nothing(engine, client):
    _open(engine, "a")
    res = client.post("/api/events/cancel", json={"eids": ["a", "nope"]})
    assert res.status_code == 404 and "'nope'" in res.json()["detail"] and "nothing was cancelled" in res.json()["detail"]
    assert engine.deploy.manager.open_events() == ["a"]
