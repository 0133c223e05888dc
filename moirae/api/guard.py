"""What no request may do to the API: store text PostgreSQL cannot hold, or print a
traceback.

:class:`Guard` is an ASGI middleware around the whole application, so it covers every
route, present and future:

- **Input text.** Every string a request carries into the app (the path, each query
  parameter, a JSON or form body, however deeply nested) is checked with
  :func:`archive.validate.text_problem`. A NUL character or an unpaired surrogate is a
  422 naming where it was (``{"detail": [{"loc": ["query", "type"], "msg": ...,
  "type": "text"}]}``, FastAPI's validation-error shape), never a 500 from the database.
- **Body size.** A request body larger than :data:`MAX_BODY` is refused with 413
  before the app sees it (a declared ``Content-Length`` at once, a streamed body as soon
  as it grows past the cap).
- **Server errors.** An exception escaping a route is written with its traceback to the
  API's log file (:mod:`moirae.runtime.errorlog`) under an error id, and the client gets a 500
  ``{"detail": "...", "error_id": "..."}``. Nothing propagates to the server, which
  would print the traceback on the terminal (the alert output of ``moirae run``). A
  failure after a response started (an SSE stream) is logged and the stream closed.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qsl

from archive.validate import text_problem
from moirae.runtime.errorlog import record_failure

MAX_BODY = 1 << 20  # the largest request body any route takes (413 beyond)


class TooLarge(Exception):
    """A request body beyond :data:`MAX_BODY`."""


def problems(value: Any, loc: tuple) -> list[dict[str, Any]]:
    """Validation errors for every string in ``value`` (JSON-like) that PostgreSQL text
    cannot hold, with its location.

    >>> problems({"note": ["ok", "a\\x00"]}, ("body",))[0]["loc"]
    ['body', 'note', 1]
    """
    out: list[dict[str, Any]] = []
    if isinstance(value, str):
        why = text_problem(value)
        if why is not None:
            out.append({"loc": list(loc), "msg": f"value {value!r} {why}", "type": "text", "input": repr(value)})
    elif isinstance(value, dict):
        for k, v in value.items():
            out += problems(k, (*loc, "<key>")) + problems(v, (*loc, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += problems(v, (*loc, i))
    return out


#: bodies decoded by their route, not text (Prometheus remote write's snappy protobuf)
BINARY_TYPES = ("application/x-protobuf", "application/octet-stream")


def request_problems(scope: dict, body: bytes | None) -> list[dict[str, Any]]:
    """The text problems of one request: path, query string, body."""
    out = problems(scope.get("path", ""), ("path",))
    qs = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(qs, keep_blank_values=True, errors="surrogateescape"):
        out += problems(name, ("query", "<name>")) + problems(value, ("query", name))
    if body:
        ctype = dict(scope.get("headers") or []).get(b"content-type", b"").decode("latin-1").lower()
        if "json" in ctype:
            try:
                parsed = json.loads(body)
            except ValueError:  # not JSON at all: the route's own validation says so
                parsed = None
            out += problems(parsed, ("body",))
        elif "x-www-form-urlencoded" in ctype:
            for name, value in parse_qsl(body.decode("latin-1"), keep_blank_values=True):
                out += problems(value, ("body", name))
        elif b"\x00" in body and not any(b in ctype for b in BINARY_TYPES):
            out.append({"loc": ["body"], "msg": "the body contains a NUL byte, which PostgreSQL text cannot hold",
                        "type": "text"})
    return out


#: The guard's rule, stated in the OpenAPI schema on every string a request may carry.
NO_NUL = "^[^\\u0000]*$"


def document_text_rule(doc: dict) -> dict:
    """Add :data:`NO_NUL` as the ``pattern`` of every string in the request parameters
    and request bodies of an OpenAPI document ``doc`` (in place; returned), so clients
    and fuzzers know the rule the guard enforces. Strings that already carry a pattern,
    a format or an enum are left alone."""
    components = doc.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen and name in components:
                seen.add(name)
                walk(components[name])
        if node.get("type") == "string" and not {"pattern", "format", "enum", "const"} & set(node):
            node["pattern"] = NO_NUL
        for key, value in node.items():
            if key != "$ref":
                walk(value)

    for item in doc.get("paths", {}).values():
        for op in item.values():
            if isinstance(op, dict):
                for param in op.get("parameters", []):
                    walk(param.get("schema"))
                walk(op.get("requestBody"))
    return doc


async def _send_json(send, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


class Guard:
    """The middleware (see the module docstring). ``logger`` receives the tracebacks."""

    def __init__(self, app, logger: logging.Logger) -> None:
        self.app = app
        self.logger = logger

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body, receive = await self._buffer(scope, receive)
        except TooLarge:
            await _send_json(send, 413, {"detail": f"the request body is larger than {MAX_BODY:,} bytes"})
            return
        found = request_problems(scope, body)
        if found:
            await _send_json(send, 422, {"detail": found})
            return
        started = False

        async def tracking_send(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - every failure is logged, none printed
            what = f"{scope.get('method', '')} {scope.get('path', '')}"
            error_id = record_failure(self.logger, what, exc)
            if not started:
                await _send_json(send, 500, {"detail": f"internal server error (error id {error_id}; "
                                                       "the server's log has the details)", "error_id": error_id})

    async def _buffer(self, scope, receive):
        """Read a small request body up front (so it can be checked), and hand the app a
        ``receive`` that replays it."""
        if scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            return None, receive
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            raise TooLarge
        chunks, more, size = [], True, 0
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None, receive
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY:
                raise TooLarge
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return body, replay
