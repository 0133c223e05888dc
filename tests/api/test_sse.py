"""The live stream: server-sent events over a real uvicorn server on a free loopback
port. A published item arrives as an SSE message, idle connections get keep-alive
comments, real recall outputs arrive as the manager produces them, and a client that
disconnects releases its bus subscription."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import httpx
import pytest

from moirae.api import serve
from recall.api import Interval, Output, OutputKind
from tests.api.api_helpers import add_event, wait_for

pytestmark = pytest.mark.postgres


def _messages(lines):
    """Parse SSE lines into (kind, data) messages and comment lines."""
    kind, data = None, []
    for line in lines:
        if line.startswith(":"):
            yield ("comment", line[1:].strip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            yield (kind, json.loads("\n".join(data)))
            kind, data = None, []


@pytest.fixture
def server(engine):
    srv = serve(engine, host="127.0.0.1", port=0, keepalive=0.3)
    yield srv
    srv.stop()


def test_a_published_item_arrives_and_idle_streams_get_keepalives(engine, server):
    bus = engine.deploy.manager.bus
    base = bus.subscribers
    t = datetime(2024, 3, 1, tzinfo=UTC)
    out = Output("hist", "e9", t, OutputKind.UPDATE, 3, "k", {"mean": 1.5}, Interval(t, t))
    with httpx.Client(base_url=server.url, timeout=10) as client, client.stream("GET", "/api/stream") as res:
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/event-stream")
        msgs = _messages(res.iter_lines())
        assert next(msgs) == ("comment", "connected")
        wait_for(lambda: bus.subscribers == base + 1, what="the subscription")
        bus.publish({"type": "event", "eid": "e9", "event": "overload"})
        bus.publish(out)
        assert next(msgs) == ("event", {"type": "event", "eid": "e9", "event": "overload"})
        kind, data = next(msgs)
        assert kind == "update" and (data["eid"], data["seq"], data["row"]) == ("e9", 3, {"mean": 1.5})
        assert data["covered"] == [t.isoformat(), t.isoformat()]
        kind, text = next(msgs)
        assert kind == "comment" and text.startswith("keep-alive")
    wait_for(lambda: bus.subscribers == base, what="the subscription to close after disconnect")


def test_recall_outputs_of_a_live_event_stream_in(engine, server):
    with httpx.Client(base_url=server.url, timeout=10) as client, \
            client.stream("GET", "/api/stream", params={"eid": "ev1"}) as res:
        msgs = _messages(res.iter_lines())
        assert next(msgs)[0] == "comment"
        add_event(engine, "other", 160)
        add_event(engine, "ev1", 170)
        kind, data = next(m for m in msgs if m[0] != "comment")
        assert kind == "insert" and data["eid"] == "ev1" and data["operator"] == "hist"
        assert data["row"]["sid"] == "s0" and data["covered"] == ["2024-03-01T02:50:00+00:00",
                                                                   "2024-03-01T03:00:00+00:00"]
        token = server.app.state.access.token  # the engine's local token (no api.token configured)
        assert client.post("/api/events/ev1/cancel", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        kind, data = next(m for m in msgs if m[0] != "comment")
        assert kind == "boundary" and data["eid"] == "ev1" and list(data["row"]["ended"].values()) == ["cancelled"]


def test_stopping_the_server_closes_open_streams(engine):
    bus = engine.deploy.manager.bus
    base = bus.subscribers
    server = serve(engine, host="127.0.0.1", port=0, keepalive=0.3)
    client = httpx.Client(base_url=server.url, timeout=10)
    res = client.send(client.build_request("GET", "/api/stream"), stream=True)
    try:
        assert next(res.iter_lines()).startswith("retry:")
        wait_for(lambda: bus.subscribers == base + 1, what="the subscription")
        t0 = time.monotonic()
        server.stop()
        assert time.monotonic() - t0 < 8 and not server.running
        wait_for(lambda: bus.subscribers == base, what="the subscription to close on shutdown")
    finally:
        res.close()
        client.close()


def test_an_item_published_as_the_headers_go_out_is_delivered(engine):
    """A browser's EventSource reports the stream open when the headers arrive, and the
    console then expects every later item: the subscription exists before they go out.
    Driven through the ASGI app itself, so the headers' instant is exact."""
    import anyio

    from moirae.api.app import create_app

    app = create_app(engine, keepalive=0.3)
    bus = engine.deploy.manager.bus
    base = bus.subscribers
    at_headers, body = [], []

    async def main():
        gone = anyio.Event()

        async def receive():
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(msg):
            if msg["type"] == "http.response.start":
                at_headers.append(bus.subscribers)
                bus.publish({"type": "event", "eid": "at-headers", "event": "overload"})
            elif msg["type"] == "http.response.body":
                body.append(msg.get("body", b""))
                if b"at-headers" in b"".join(body):
                    gone.set()

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": "/api/stream", "raw_path": b"/api/stream", "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 80), "root_path": ""}
        with anyio.fail_after(20):
            await app(scope, receive, send)

    anyio.run(main)
    assert at_headers == [base + 1]
    assert b'"eid": "at-headers"' in b"".join(body)
    wait_for(lambda: bus.subscribers == base, what="the subscription to close after disconnect")
