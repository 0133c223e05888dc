"""The monitor routes (moirae/api/monitors_api.py) over a real engine and PostgreSQL:
deploy from a file's text (deployed, unchanged, updated), a bad file refused whole
(422, the engine and moirae_monitors unchanged), list, undeploy (404 when unknown),
the token on mutations, and 409 from the read-only console. The monitors here declare
no Spark query (their apply records a marker), so no Spark runs: the lifecycle on
running Spark queries is tests/moirae/test_lifecycle.py."""

from __future__ import annotations

import hashlib

import pytest

from moirae.api import create_app
from moirae.read.readonly import ReadOnlyEngine
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres

APPLIED: list[str] = []


def loader(text: str):
    """``name: N`` and ``value: V`` lines; ``bad: yes`` fails while being applied."""
    fields = dict(line.split(": ", 1) for line in text.strip().splitlines())
    if "name" not in fields:
        raise ValueError("line 1: key 'name': a monitor needs a name")

    def apply(engine):
        APPLIED.append(f"{fields['name']}={fields.get('value')}")
        if fields.get("bad") == "yes":
            raise ValueError(f"line 3: key 'bad': monitor {fields['name']!r} cannot be applied")

    return fields["name"], hashlib.sha256(text.encode()).hexdigest()[:16], apply


@pytest.fixture
def client(engine):
    engine.monitor_loader = loader
    APPLIED.clear()
    return api_client(create_app(engine))


def stored(engine):
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT name, version, state FROM moirae_monitors ORDER BY name")
        return cur.fetchall()


def test_deploy_list_update_undeploy(engine, client):
    res = client.post("/api/monitors", content="name: m1\nvalue: 1\n", headers={"Content-Type": "application/yaml"})
    assert res.status_code == 200, res.text
    first = res.json()
    assert first["result"] == "deployed" and first["name"] == "m1" and APPLIED == ["m1=1"]
    # the same text again: nothing applied
    again = client.post("/api/monitors", json={"text": "name: m1\nvalue: 1\n"}).json()
    assert again["result"] == "unchanged" and again["version"] == first["version"] and APPLIED == ["m1=1"]
    # a changed file: a new version
    upd = client.post("/api/monitors", json={"text": "name: m1\nvalue: 2\n"}).json()
    assert upd["result"] == "updated" and upd["previous"] == first["version"] and APPLIED == ["m1=1", "m1=2"]
    listed = client.get("/api/monitors").json()["monitors"]
    assert [(m["name"], m["version"], m["state"]) for m in listed] == [("m1", upd["version"], "stopped")]
    assert stored(engine) == [("m1", upd["version"], "stopped")]  # the engine was not started
    # retired
    gone = client.delete("/api/monitors/m1")
    assert gone.status_code == 200 and gone.json()["version"] == upd["version"]
    assert client.get("/api/monitors").json() == {"monitors": []} and stored(engine) == []
    assert client.delete("/api/monitors/m1").status_code == 404


def test_a_bad_monitor_is_refused_whole(engine, client):
    assert client.post("/api/monitors", json={"text": "name: m1\nvalue: 1\n"}).status_code == 200
    before = stored(engine)
    # fails while applied: refused, and the running version is applied again
    res = client.post("/api/monitors", json={"text": "name: m1\nvalue: 2\nbad: yes\n"})
    assert res.status_code == 422 and "line 3" in res.json()["detail"], res.text
    assert stored(engine) == before and APPLIED[-1] == "m1=1"
    # unreadable: nothing applied at all
    n = len(APPLIED)
    for body in ({"text": "value: 3\n"}, {"text": "  "}, {"nope": 1}):
        res = client.post("/api/monitors", json=body)
        assert res.status_code == 422, (body, res.text)
    assert len(APPLIED) == n and stored(engine) == before


def test_mutations_need_the_token_and_an_engine(engine, client):
    anonymous = api_client(client.app, token=False)
    assert anonymous.post("/api/monitors", json={"text": "name: m1\n"}).status_code == 401
    assert anonymous.delete("/api/monitors/m1").status_code == 401
    assert stored(engine) == [] and APPLIED == []
    assert client.post("/api/monitors", json={"text": "name: m1\n"}).status_code == 200
    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        console = api_client(create_app(ro))
        assert [m["name"] for m in console.get("/api/monitors").json()["monitors"]] == ["m1"]
        assert console.post("/api/monitors", json={"text": "name: m2\n"}).status_code == 409
        assert console.delete("/api/monitors/m1").status_code == 409
    finally:
        ro.close()


def test_an_alert_says_which_monitor_version_raised_it(engine, client):
    from datetime import UTC, datetime

    from moirae.ingest.events import EventRecord

    ts = datetime(2024, 3, 1, 2, tzinfo=UTC)
    engine.events.add([EventRecord("m1", "a1", ts, {"sid": "s1"}, monitor="m1", version="0123456789abcdef"),
                       EventRecord("plain", "p1", ts, {"sid": "s1"})])
    listed = {e["eid"]: e for e in client.get("/api/events", params={"limit": 10}).json()["events"]}
    assert (listed["a1"]["monitor"], listed["a1"]["version"]) == ("m1", "0123456789abcdef")
    assert "monitor" not in listed["p1"]
    assert engine.events.get("a1").version == "0123456789abcdef"  # read back from the log, not memory
    engine.events._recent.clear()
    assert engine.events.get("a1").version == "0123456789abcdef"
