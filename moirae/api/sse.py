"""The live update stream: server-sent events of new events, recall
outputs and revisions, and boundaries, as the engine's bus publishes them.

Each bus item becomes one SSE message ``event: <type>`` (``event`` for a new alert,
``insert`` / ``update`` / ``delete`` for recall outputs and revisions, ``boundary``)
with the JSON of :func:`moirae.read.views.bus_item_json` as ``data``. A comment line keeps
idle connections alive every ``keepalive`` seconds. The subscription is a bounded,
drop-oldest queue (a slow client never slows the Recall Manager); it is closed when
the client disconnects or the server stops.

>>> print(format_message({"type": "event", "eid": "e1"}), end="")
event: event
data: {"type": "event", "eid": "e1"}
<BLANKLINE>
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from moirae.read import views
from moirae.runtime.metrics import SSE_CLIENTS


def _eid(item: Any) -> str | None:
    return item.get("eid") if isinstance(item, dict) else getattr(item, "eid", None)


def format_message(data: dict[str, Any]) -> str:
    kind = data.get("kind") if data.get("type") == "output" else data.get("type", "message")
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


def subscribe(bus, maxsize: int = 1000, eid: str | None = None):
    """The subscription a stream will read: taken before the response's headers go out,
    since a browser's ``EventSource`` reports the stream open on the headers, and an item
    published between them and a subscription taken in the body would be lost."""
    accept = None if eid is None else (lambda o: _eid(o) == eid)
    return bus.subscribe(maxsize=maxsize, accept=accept)


async def stream(sub, request, keepalive: float = 5.0, poll: float = 0.5) -> AsyncIterator[str]:
    """Yield SSE text for every item of ``sub`` (from :func:`subscribe`); closes it at the end."""
    SSE_CLIENTS.inc()
    try:
        yield "retry: 3000\n: connected\n\n"
        last = time.monotonic()
        while not sub.closed:
            item = await anyio.to_thread.run_sync(sub.get, min(poll, keepalive))
            if item is not None:
                yield format_message(views.bus_item_json(item))
                last = time.monotonic()
            elif time.monotonic() - last >= keepalive:
                yield f": keep-alive {int(time.time())}\n\n"
                last = time.monotonic()
            if await request.is_disconnected():
                break
    finally:
        SSE_CLIENTS.dec()
        sub.close()
