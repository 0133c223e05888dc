"""The live update stream (DESIGN.md §5): server-sent events of new events, recall
outputs and revisions, and boundaries, as the engine's bus publishes them.

Each bus item becomes one SSE message ``event: <type>`` (``event`` for a new alert,
``insert`` / ``update`` / ``delete`` for recall outputs and revisions, ``boundary``)
with the JSON of :func:`moirae.views.bus_item_json` as ``data``. A comment line keeps
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

from moirae import views


def _eid(item: Any) -> str | None:
    return item.get("eid") if isinstance(item, dict) else getattr(item, "eid", None)


def format_message(data: dict[str, Any]) -> str:
    kind = data.get("kind") if data.get("type") == "output" else data.get("type", "message")
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


async def stream(bus, request, keepalive: float = 5.0, poll: float = 0.5, maxsize: int = 1000,
                 eid: str | None = None) -> AsyncIterator[str]:
    """Yield SSE text for every item published on ``bus`` after subscribing."""
    accept = None if eid is None else (lambda o: _eid(o) == eid)
    sub = bus.subscribe(maxsize=maxsize, accept=accept)
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
        sub.close()
