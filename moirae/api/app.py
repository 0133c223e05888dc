"""The HTTP API (DESIGN.md §5): a thin FastAPI front over the engine.

Routes (all JSON unless noted):

- ``GET /api/events?type=&since=&until=&limit=&offset=``: events newest first.
- ``GET /api/events/{eid}``: the event, its context, similar past events, recall
  results (current and revision history), progress and provenance.
- ``POST /api/events/{eid}/cancel`` and ``POST /api/events/{eid}/accelerate`` (optional
  body ``{"tickets": N}``): steering (M 4.4); the answer says what changed.
- ``GET /api/archive/chunks?stream=``: the chunk catalog.
- ``GET /api/scheduler/tasks``: the Recall Manager's tasks.
- ``GET /api/stream?eid=``: server-sent events (:mod:`moirae.api.sse`).
- ``GET /``: the console page (:mod:`moirae.api.console_page`).

Errors: an unknown eid is 404, a bad parameter or body 422 with the reason, a
mutating call without the configured token 401, steering without an engine in this
process 409.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from moirae import views
from moirae.api import sse, steer
from moirae.api.auth import check_bind, token_matches
from moirae.api.console_page import PAGE
from recall.outputs import Bus


class AccelerateBody(BaseModel):
    """``POST /api/events/{eid}/accelerate`` body: how many tickets to add."""

    model_config = ConfigDict(extra="forbid")
    tickets: StrictInt = Field(100, ge=1, le=steer.MAX_TICKETS)


def parse_time(name: str, text: str | None) -> datetime | None:
    """An ISO-8601 time from a query parameter (a time without offset is UTC); a bad
    one is a 422 naming the parameter and the value."""
    if text is None or text == "":
        return None
    try:  # an unencoded "+01:00" offset arrives as " 01:00"
        t = datetime.fromisoformat(text.strip().replace(" ", "+") if "T" in text else text.strip())
    except ValueError:
        raise HTTPException(422, f"{name}: not an ISO-8601 time (like 2024-03-01T06:00:00Z): {text!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def bus_of(engine) -> Bus:
    manager = getattr(engine.deploy, "manager", None)
    return manager.bus if manager is not None else engine.deploy.bus


def create_app(engine, token: str | None = None, host: str | None = None, keepalive: float = 5.0) -> FastAPI:
    """The API and console over ``engine`` (a :class:`moirae.Engine`, or a
    :class:`moirae.api.readonly.ReadOnlyEngine`). ``token`` and ``host`` default to
    the engine's ``api`` settings; serving ``host`` beyond loopback without a token is
    refused (:class:`moirae.api.auth.ApiError`)."""
    api_cfg = engine.settings.api
    token = api_cfg.token if token is None else token
    check_bind(host or api_cfg.host, token)
    app = FastAPI(title="Moirae", summary="history-enhanced monitoring", version="1")
    app.state.engine = engine

    def require_token(request: Request) -> None:
        if token and not token_matches(request.headers.get("authorization"), token):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    def event_or_404(eid: str) -> dict[str, Any]:
        detail = views.event_detail(engine, eid)
        if detail is None:
            raise HTTPException(404, f"no event {eid!r}")
        return detail

    def steering(fn, *args) -> dict[str, Any]:
        try:
            return fn(engine, *args)
        except steer.NoSuchEvent as exc:
            raise HTTPException(404, str(exc)) from None
        except steer.EngineNotRunning as exc:
            raise HTTPException(409, str(exc)) from None
        except steer.BadTickets as exc:
            raise HTTPException(422, str(exc)) from None

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def console() -> str:
        return PAGE

    @app.get("/api/events")
    def list_events(type: Annotated[str | None, Query(max_length=200)] = None,  # noqa: A002 - the API's name
                    since: str | None = None, until: str | None = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                    offset: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        lo, hi = parse_time("since", since), parse_time("until", until)
        if lo is not None and hi is not None and lo > hi:
            raise HTTPException(422, f"since ({since}) is after until ({until})")
        return views.event_list(engine, type or None, lo, hi, limit, offset)

    @app.get("/api/events/{eid}")
    def get_event(eid: str) -> dict[str, Any]:
        return event_or_404(eid)

    @app.post("/api/events/{eid}/cancel", dependencies=[Depends(require_token)])
    def cancel(eid: str) -> dict[str, Any]:
        return steering(steer.cancel, eid)

    @app.post("/api/events/{eid}/accelerate", dependencies=[Depends(require_token)])
    def accelerate(eid: str, body: Annotated[AccelerateBody | None, Body()] = None) -> dict[str, Any]:
        return steering(steer.accelerate, eid, (body or AccelerateBody()).tickets)

    @app.get("/api/archive/chunks")
    def chunks(stream: str | None = None) -> dict[str, Any]:
        try:
            return views.chunk_catalog(engine, stream)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    @app.get("/api/scheduler/tasks")
    def tasks() -> dict[str, Any]:
        return views.scheduler_tasks(engine)

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        return {"engine_running": views.running(engine), "token_required": bool(token),
                "archive": engine.archiver.status()}

    @app.get("/api/stream")
    async def live(request: Request, eid: str | None = None) -> StreamingResponse:
        return StreamingResponse(sse.stream(bus_of(engine), request, keepalive=keepalive, eid=eid),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
