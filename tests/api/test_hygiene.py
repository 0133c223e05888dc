"""API hygiene: text PostgreSQL cannot hold is a 422 that says where,
never a 500; a server failure is a 500 with an error id whose traceback is in the log
file and never on the terminal (the alert output of ``moirae run``)."""

from __future__ import annotations

import httpx
import pytest

from moirae.api import create_app, serve
from tests.api.api_helpers import add_event
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres


@pytest.fixture
def client(engine):
    return api_client(create_app(engine), raise_server_exceptions=False)


@pytest.mark.parametrize("nul", ["%00", "a%00b"])
def test_nul_anywhere_is_a_422_naming_where(engine, client, nul):
    add_event(engine, "e1", 170, submit=False)
    cases = [
        ("GET", f"/api/events?type={nul}", {}, ["query", "type"]),
        ("GET", f"/api/events?since={nul}", {}, ["query", "since"]),
        ("GET", f"/api/archive/chunks?stream={nul}", {}, ["query", "stream"]),
        ("GET", f"/api/stream?eid={nul}", {}, ["query", "eid"]),
        ("GET", f"/api/events?{nul}=1", {}, ["query", "<name>"]),
        ("GET", f"/api/events/{nul}", {}, ["path"]),
        ("POST", f"/api/events/{nul}/cancel", {}, ["path"]),
        ("POST", "/api/events/e1/accelerate", {"json": {"tickets": 5, "note": nul.replace("%00", "\x00")}},
         ["body", "note"]),
    ]
    for method, path, kwargs, loc in cases:
        res = client.request(method, path, **kwargs)
        assert res.status_code == 422, (method, path, kwargs, res.text)
        (problem,) = res.json()["detail"]
        assert problem["loc"] == loc, (path, problem)
        assert "NUL character" in problem["msg"] and "PostgreSQL" in problem["msg"], problem


def test_unpaired_surrogates_in_json_are_a_422(client):
    """A JSON escape is the one way a lone surrogate reaches the app (a URL carries
    UTF-8, whose decoding turns a bad sequence into U+FFFD, which PostgreSQL holds)."""
    for raw in (b'{"tickets": 5, "note": "\\ud800"}', b'{"tickets": 5, "note": ["ok", "x\\udfffy"]}'):
        res = client.post("/api/events/e1/accelerate", content=raw, headers={"content-type": "application/json"})
        assert res.status_code == 422, res.text
        (problem,) = res.json()["detail"]
        assert problem["loc"][:2] == ["body", "note"] and "UTF-8" in problem["msg"], problem


def test_nul_in_a_form_body_and_a_raw_body(client):
    res = client.post("/api/events/e1/accelerate", content=b"tickets=1&note=a%00",
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body", "note"]
    res = client.post("/api/events/e1/accelerate", content=b"a\x00b", headers={"content-type": "text/plain"})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body"]


def test_good_requests_still_pass_the_guard(engine, client):
    add_event(engine, "e1", 170, submit=False)
    assert client.get("/api/events", params={"type": "overload"}).json()["count"] == 1
    assert client.get("/api/events/e1").json()["eid"] == "e1"
    res = client.post("/api/events/e1/accelerate", json={"tickets": 0})
    assert res.status_code == 422  # the route's own validation, after the guard


def test_times_whose_utc_instant_leaves_years_1_to_9999_are_clamped_not_refused(engine, client):
    """Schema-valid times the fuzzer found refused with a 422: year 1 at +04:02 is before
    year 1 in UTC; as bounds they mean 'since the beginning' / 'until the end'."""
    add_event(engine, "e1", 170, submit=False)
    res = client.get("/api/events", params={"since": "0001-01-01T00:00:00.0+04:02", "type": "overload"})
    assert res.status_code == 200, res.text
    assert res.json()["count"] == 1
    res = client.get("/api/events", params={"until": "9999-12-31T23:59:59-01:00", "type": "overload"})
    assert res.status_code == 200 and res.json()["count"] == 1, res.text


def test_a_server_failure_is_a_500_with_an_error_id_logged_not_printed(engine, capfd):
    """A real failure: the event log's table is gone. Served by uvicorn, as `moirae run`
    serves it; the terminal gets nothing, the log file the traceback under the id."""
    app_server = serve(engine, host="127.0.0.1", port=0)
    try:
        with engine.db.connection() as conn, conn.cursor() as cur:
            cur.execute("DROP TABLE moirae_events CASCADE")
        capfd.readouterr()
        with httpx.Client(base_url=app_server.url, timeout=30) as c:
            res = c.get("/api/events", params={"type": "overload"})
            nul = c.get("/api/events/%00")
            nul_q = c.get("/api/events", params={"type": "\x00"})
        log = app_server.app.state.error_log
    finally:
        app_server.stop()
    out, err = capfd.readouterr()
    assert res.status_code == 500, res.text
    body = res.json()
    assert body["error_id"] in body["detail"]
    text = log.read_text()
    assert f"error id {body['error_id']}" in text and "Traceback" in text and "moirae_events" in text
    assert (nul.status_code, nul_q.status_code) == (422, 422)
    assert "Traceback" not in out + err and body["error_id"] not in out + err, (out, err)
