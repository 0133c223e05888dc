"""The HTTP API: a thin FastAPI front over the engine's
:class:`~moirae.read.abc.EngineSurface`, one router per concern.

Routes (all JSON unless noted):

- ``GET /api/events?type=&since=&until=&limit=&offset=``: events newest first.
- ``GET /api/events/{eid}``: the event, its context, similar past events, recall
  results (current and revision history), progress and provenance.
- ``POST /api/events/{eid}/cancel`` and ``POST /api/events/{eid}/accelerate`` (optional
  body ``{"tickets": N}``): steering (M 4.4); the answer says what changed.
- ``POST /api/events/cancel`` with body ``{"eids": [...]}``: cancel many events at once
  (a cancel storm: one pass, one commit); the answer counts the tasks per event.
- ``GET /api/monitors``, ``POST /api/monitors`` (a monitor file's text),
  ``DELETE /api/monitors/{name}``: monitors on the running engine (:mod:`moirae.api.monitors_api`).
- ``POST /api/retractions``, ``POST /api/retractions/{id}/undo``, ``GET /api/retractions``,
  ``GET /api/lookup``, ``GET /api/events/{eid}/support``: retractions, corrections and
  forward lookup (:mod:`moirae.api.retract_api`).
- ``GET /api/archive/chunks?stream=``: the chunk catalog.
- ``GET /api/scheduler/tasks``: the Recall Manager's tasks.
- ``GET /api/stream?eid=``: server-sent events (:mod:`moirae.api.sse`).
- ``GET /``: the console page (:mod:`moirae.api.console_page`).

- ``POST /api/session`` (token): a console session cookie and its CSRF token.
- ``GET /api/audit?limit=``: who changed what (:mod:`moirae.api.audit`).

Access (:mod:`moirae.api.access`): Host and Origin are checked on every request, a
mutating call needs the token or a same-origin console session with its CSRF token
(on loopback too), off loopback reads need them as well; mutations are rate limited
(429) and audited; request bodies are capped (413, :mod:`moirae.api.guard`).

Errors: an unknown eid is 404, a bad parameter or body 422 with the reason (text
PostgreSQL cannot hold, such as a NUL, included: :mod:`moirae.api.guard`), a mutating
call without the token or session 401, steering without an engine in this process 409,
and a failure of the server 500 with an ``error_id`` naming the traceback in
``<data_dir>/logs/api.log`` (never printed on the terminal). Every answer has a response
model (:mod:`moirae.api.models`); the OpenAPI schema is served at ``/openapi.json``
(browsable at ``/docs``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.background import BackgroundTask

from moirae.api import incidents_api, metrics_api, monitors_api, receivers_api, retract_api, sse, steer
from moirae.api import models as m
from moirae.api.access import Access, Gate, local_token
from moirae.api.audit import audit_request, recent
from moirae.api.auth import check_bind
from moirae.api.console_page import PAGE
from moirae.api.errors import BadEids, BadTickets, EngineNotRunning, NoSuchEvent
from moirae.api.guard import Guard, document_text_rule
from moirae.base.redact import redact_all
from moirae.read import views
from moirae.runtime.errorlog import file_logger, log_dir


def _whole_number(v: Any) -> Any:
    """JSON Schema's ``integer``: a JSON number without a fractional part (so ``5.0``
    is 5), but never a boolean or a string."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"must be a whole number, got {v!r}")
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError(f"must be a whole number, got {v!r}")
        return int(v)
    return v


class AccelerateBody(BaseModel):
    """``POST /api/events/{eid}/accelerate`` body: how many tickets to add."""

    model_config = ConfigDict(extra="forbid")
    tickets: Annotated[int, BeforeValidator(_whole_number)] = Field(100, ge=1, le=steer.MAX_TICKETS)


class CancelBody(BaseModel):
    """``POST /api/events/cancel`` body: the events whose recall to cancel."""

    model_config = ConfigDict(extra="forbid")
    eids: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(min_length=1,
                                                                            max_length=steer.MAX_BULK)


def parse_time(name: str, text: str | None) -> datetime | None:
    """An ISO-8601 time from a query parameter (a time without offset is UTC); a bad
    one is a 422 naming the parameter and the value. A valid time whose UTC instant is
    outside Python's years 1-9999 (``0001-01-01T00:00+04:02``) is clamped to that range.

    >>> parse_time("since", "0001-01-01T00:00:00.0+04:02")
    datetime.datetime(1, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)
    >>> parse_time("until", "9999-12-31T23:59:59-01:00").year
    9999
    """
    if text is None or text == "":
        return None
    try:  # an unencoded "+01:00" offset arrives as " 01:00"
        t = datetime.fromisoformat(text.strip().replace(" ", "+") if "T" in text else text.strip())
    except ValueError:
        raise HTTPException(422, f"{name}: not an ISO-8601 time (like 2024-03-01T06:00:00Z): {text!r}") from None
    if t.tzinfo is None:
        return t.replace(tzinfo=UTC)
    try:  # as UTC: PostgreSQL refuses offsets beyond 15:59 that ISO-8601 allows
        return t.astimezone(UTC)
    except OverflowError:  # a valid time whose UTC instant lies before year 1 or after 9999:
        # as a bound, the same as the first or last instant Python can hold (no row lies beyond)
        return datetime.min.replace(tzinfo=UTC) if t.year == 1 else datetime.max.replace(tzinfo=UTC)


#: An ISO-8601 time query parameter (parsed by :func:`parse_time`, which also takes a
#: time without an offset, as UTC).
TIME = Query(json_schema_extra={"format": "date-time"},
             description="ISO-8601 time, e.g. 2024-03-01T06:00:00Z (no offset: UTC); since must not be after until")


def create_app(engine, token: str | None = None, host: str | None = None, keepalive: float = 5.0,
               tls: bool | None = None) -> FastAPI:
    """The API and console over ``engine`` (a :class:`~moirae.read.abc.EngineSurface`:
    a :class:`moirae.Engine`, or a :class:`moirae.read.readonly.ReadOnlyEngine`).
    ``token`` and ``host`` default to the engine's ``api`` settings; serving ``host``
    beyond loopback without a token is refused (:class:`moirae.api.auth.ApiError`).
    Without a configured token, mutations take the engine's local token
    (:func:`moirae.api.access.local_token`) or a console session."""
    api_cfg = engine.settings.api
    token = api_cfg.token if token is None else token
    host = host or api_cfg.host
    check_bind(host, token)
    tls = bool(getattr(api_cfg, "tls_cert", "")) if tls is None else tls
    access = Access(token or local_token(engine.settings.data_dir), host,
                    tuple(getattr(api_cfg, "allowed_hosts", ()) or ()), tls=tls)
    app = FastAPI(title="Moirae", summary="history-enhanced monitoring", version="1",
                  responses=m.error_responses(422, "4XX", 500))
    app.state.engine = engine
    app.state.error_log = log_dir(engine.settings.data_dir) / "api.log"
    app.state.access = access
    app.add_middleware(Guard, logger=file_logger("moirae.api.errors", app.state.error_log))
    app.add_middleware(Gate, access=access)  # outermost: Host, Origin, reads off loopback
    _document_text_rule(app)
    require_token = access.mutate
    app.include_router(_page_router(access))
    app.include_router(incidents_api.router(engine, require_token))
    app.include_router(_events_router(engine))
    app.include_router(_steer_router(engine, require_token))
    app.include_router(monitors_api.router(engine, require_token))
    app.include_router(retract_api.router(engine, require_token))
    app.include_router(_engine_router(engine, token, access))
    app.include_router(_stream_router(engine, keepalive))
    app.include_router(receivers_api.router(engine, access.machine))
    app.include_router(metrics_api.router())
    return app


def _document_text_rule(app: FastAPI) -> None:
    """Serve the OpenAPI schema with the text rule of :mod:`moirae.api.guard` in it."""
    plain_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_text_rule(plain_openapi())
        return app.openapi_schema

    app.openapi = openapi


def _page_router(access: Access) -> APIRouter:
    """The console's page (on loopback with a fresh session and its CSRF token) and
    ``POST /api/session``, the token exchanged for a session (off loopback)."""
    r = APIRouter()

    @r.get("/", response_class=HTMLResponse, include_in_schema=False)
    def console() -> HTMLResponse:
        if not access.loopback:
            return HTMLResponse(PAGE)
        cookie, csrf = access.new_session()
        page = HTMLResponse(PAGE.replace("<head>", f'<head><meta name="moirae-csrf" content="{csrf}">', 1))
        access.set_cookie(page, cookie)
        return page

    @r.post("/api/session", response_model=m.Session, dependencies=[Depends(access.machine)])
    def session() -> JSONResponse:
        cookie, csrf = access.new_session()
        answer = JSONResponse({"csrf": csrf})
        access.set_cookie(answer, cookie)
        return answer

    return r


def _events_router(engine) -> APIRouter:
    """``GET /api/events`` and ``GET /api/events/{eid}``."""
    r = APIRouter()

    @r.get("/api/events", response_model=m.EventList)
    def list_events(type: Annotated[str | None, Query(max_length=200)] = None,  # noqa: A002 - the API's name
                    since: Annotated[str | None, TIME] = None, until: Annotated[str | None, TIME] = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                    offset: Annotated[int, Query(ge=0, le=10**12)] = 0,
                    suppressed: Annotated[bool | None, Query(description="only alerts a rule suppresses now "
                                                                         "(true) or only the others (false)")] = None,
                    ) -> dict[str, Any]:
        lo, hi = parse_time("since", since), parse_time("until", until)
        if lo is not None and hi is not None and lo > hi:
            raise HTTPException(422, f"since ({since}) is after until ({until})")
        return views.event_list(engine, type or None, lo, hi, limit, offset, suppressed)

    @r.get("/api/events/{eid}", response_model=m.EventDetail)
    def get_event(eid: str) -> dict[str, Any]:
        detail = views.event_detail(engine, eid)
        if detail is None:
            raise HTTPException(404, f"no event {eid!r}")
        return detail

    return r


def _steer_router(engine, require_token) -> APIRouter:
    """Steering (M 4.4): cancel one or many events, accelerate one; each needs the token
    (or a console session) and is audited."""
    r = APIRouter(dependencies=[Depends(require_token)])

    def steering(fn, *args, request: Request, action: str, target: str, detail=None) -> dict[str, Any]:
        try:
            out = fn(engine, *args)
            audit_request(request, action, target, detail)
            return out
        except NoSuchEvent as exc:
            raise HTTPException(404, str(exc)) from None
        except EngineNotRunning as exc:
            raise HTTPException(409, str(exc)) from None
        except (BadTickets, BadEids) as exc:
            raise HTTPException(422, str(exc)) from None

    @r.post("/api/events/cancel", response_model=m.SteerManyResult)
    def cancel_many(request: Request, body: CancelBody) -> dict[str, Any]:
        return steering(steer.cancel_many, body.eids, request=request, action="cancel", target=",".join(body.eids)[:1000],
                        detail={"eids": body.eids[:100], "count": len(body.eids)})

    @r.post("/api/events/{eid}/cancel", response_model=m.SteerResult)
    def cancel(request: Request, eid: str) -> dict[str, Any]:
        return steering(steer.cancel, eid, request=request, action="cancel", target=eid)

    @r.post("/api/events/{eid}/accelerate", response_model=m.SteerResult)
    def accelerate(request: Request, eid: str, body: Annotated[AccelerateBody | None, Body()] = None) -> dict[str, Any]:
        tickets = (body or AccelerateBody()).tickets
        return steering(steer.accelerate, eid, tickets, request=request, action="accelerate", target=eid,
                        detail={"tickets": tickets})

    return r


def _engine_router(engine, token: str | None, access: Access) -> APIRouter:
    """The chunk catalog, the scheduler's tasks, the engine's status (redacted:
    :mod:`moirae.base.redact`) and the audit log."""
    r = APIRouter()

    @r.get("/api/archive/chunks", response_model=m.ChunkCatalog)
    def chunks(stream: str | None = None) -> dict[str, Any]:
        try:
            return views.chunk_catalog(engine, stream)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    @r.get("/api/scheduler/tasks", response_model=m.SchedulerTasks)
    def tasks() -> dict[str, Any]:
        return views.scheduler_tasks(engine)

    @r.get("/api/status", response_model=m.Status)
    def status() -> dict[str, Any]:
        return redact_all({"engine_running": views.running(engine), "token_required": bool(token) or not access.loopback,
                           "archive": engine.archive.status(), "live": engine.live_status()})

    @r.get("/api/audit", response_model=m.AuditLog)
    def audit_log(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
        return {"records": recent(engine.db, limit)}

    return r


def _stream_router(engine, keepalive: float) -> APIRouter:
    """``GET /api/stream``: the live updates as server-sent events (:mod:`moirae.api.sse`)."""
    r = APIRouter()

    @r.get("/api/stream", response_class=StreamingResponse,
           responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}})
    async def live(request: Request, eid: str | None = None) -> StreamingResponse:
        sub = sse.subscribe(engine.bus, eid=eid)  # before the headers: see sse.subscribe
        return StreamingResponse(sse.stream(sub, request, keepalive=keepalive),
                                 media_type="text/event-stream", background=BackgroundTask(sub.close),
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return r
