"""Helpers of the API tests: the archived test data, events, waiting."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta

from moirae.ingest.events import EventRecord

T0 = datetime(2024, 3, 1, tzinfo=UTC)
HOURS = 3  # 18 chunks of 10 minutes


def add_event(engine, eid: str, minutes: float, sid: str = "s0", submit: bool = True, event: str = "overload",
              context=None, surrounding=None) -> EventRecord:
    rec = EventRecord(event, eid, T0 + timedelta(minutes=minutes), {"sid": sid, "avg_bw": 91.5},
                      context=context or [{"sid": sid, "cpu": 97.0}], surrounding=surrounding or {})
    assert engine.deploy.events.add([rec]) == [rec]
    if submit:
        engine.deploy.manager.submit(rec.as_event(), ["hist"])
    return rec


def wait_for(cond, timeout: float = 60.0, what: str = "condition"):
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


def client(app, token: bool = True, **kwargs):
    """A TestClient of ``app`` as a local caller would be: Host 127.0.0.1 and (``token``)
    the app's bearer token (``api.token`` or the engine's local token)."""
    from fastapi.testclient import TestClient

    headers = {"Authorization": f"Bearer {app.state.access.token}"} if token else {}
    return TestClient(app, base_url="http://127.0.0.1", headers=headers, **kwargs)
