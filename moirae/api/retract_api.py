"""Retraction and forward-lookup routes of the HTTP API (:mod:`moirae.retract`):

- ``POST /api/retractions`` with ``{"reason", "by"?, "ids"? | "stream" + ("key"? +
  "start"? + "end"? | "predicate"), "set"?, "confirm"?}``: retract (or, with ``set``,
  correct) source rows; the answer lists the alerts evaluated again and those
  withdrawn. A refusal (a predicate that is not one safe condition, an unknown stream
  or column, a selection over the configured share of the archive unconfirmed) is 422
  with one line saying why, and nothing changes.
- ``POST /api/retractions/{id}/undo``: undo it (the alerts it withdrew that stand again
  come back).
- ``GET /api/retractions``, ``GET /api/retractions/{id}``: what was retracted, by whom, why.
- ``GET /api/lookup?ids=&stream=&key=col:value&start=&end=&predicate=``: forward lookup:
  which alerts the rows fed, which are still open, whether future alerts can use them.
- ``GET /api/events/{eid}/support``: the alert's status (active / retracted, with the
  reason) and whether its support is still in the archive.

Mutations follow the token rule of :mod:`moirae.api.access` and every step is audited
(:mod:`moirae.api.audit`); without an engine in this process (``moirae console``) they
are 409.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from moirae.api.audit import audit, audit_request
from moirae.api.errors import EngineNotRunning
from moirae.retract.errors import NoSuchRetraction, RetractError

NO_NUL = r"^[^\x00]*$"
TEXT = Annotated[str, Field(min_length=1, max_length=2000, pattern=NO_NUL)]


class RetractBody(BaseModel):
    """``POST /api/retractions``: the rows (one way), the reason, new values for a correction."""

    model_config = ConfigDict(extra="forbid")
    reason: TEXT
    by: Annotated[str | None, Field(max_length=200, pattern=NO_NUL)] = None
    ids: Annotated[list[int] | None, Field(max_length=100_000)] = None
    stream: Annotated[str | None, Field(max_length=200, pattern=NO_NUL)] = None
    key: dict[str, str | int | float | bool] | None = None
    start: Annotated[str | None, Field(max_length=64)] = None
    end: Annotated[str | None, Field(max_length=64)] = None
    predicate: Annotated[str | None, Field(max_length=4000, pattern=NO_NUL)] = None
    set: dict[str, str | int | float | bool | None] | None = None
    confirm: bool = False


class UndoBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: Annotated[str | None, Field(max_length=200, pattern=NO_NUL)] = None


class Answer(BaseModel):
    """A retraction's, an undo's or a lookup's answer (its fields as the engine gives them)."""

    model_config = ConfigDict(extra="allow")


class RetractionList(BaseModel):
    retractions: list[dict[str, Any]]


def router(engine, require_token) -> APIRouter:
    r = APIRouter()

    def acting(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NoSuchRetraction as exc:
            raise HTTPException(404, str(exc)) from None
        except RetractError as exc:
            raise HTTPException(422, str(exc)) from None
        except EngineNotRunning as exc:
            raise HTTPException(409, str(exc)) from None

    def recorder(request: Request, by: str | None):
        actor = getattr(request.state, "actor", None) or "anonymous"
        actor = f"{actor}:{by}" if by else actor
        client = request.client.host if request.client else None
        return lambda _who, action, target, detail: audit(engine.db, actor, action, target,
                                                          {**detail, "client": client})

    @r.post("/api/retractions", response_model=Answer, dependencies=[Depends(require_token)])
    async def retract(request: Request, body: RetractBody) -> dict:
        selection = {k: v for k, v in (("ids", body.ids), ("stream", body.stream), ("key", body.key),
                                       ("start", body.start), ("end", body.end), ("predicate", body.predicate))
                     if v not in (None, [], {})}
        author = body.by or getattr(request.state, "actor", None) or "anonymous"
        try:
            return await run_in_threadpool(acting, engine.retract, selection, body.reason, author, body.set,
                                           body.confirm, recorder(request, body.by))
        except HTTPException as exc:
            if exc.status_code == 422:  # a refusal is a step too: who tried what, and why not
                audit_request(request, "retraction refused", body.stream, {"why": exc.detail}, by=body.by)
            raise

    @r.post("/api/retractions/{rid}/undo", response_model=Answer, dependencies=[Depends(require_token)])
    async def undo(request: Request, rid: int, body: UndoBody | None = None) -> dict:
        by = (body or UndoBody()).by
        author = by or getattr(request.state, "actor", None) or "anonymous"
        return await run_in_threadpool(acting, engine.undo_retraction, rid, author, recorder(request, by))

    @r.get("/api/retractions", response_model=RetractionList)
    def list_retractions(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict:
        return {"retractions": acting(engine.retraction_list, limit)}

    @r.get("/api/retractions/{rid}", response_model=Answer)
    def get_retraction(rid: int) -> dict:
        return acting(engine.retraction, rid)

    @r.get("/api/lookup", response_model=Answer)
    def lookup(ids: Annotated[str | None, Query(max_length=100_000, pattern=r"^[0-9,\s-]*$")] = None,
               stream: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
               key: Annotated[str | None, Query(max_length=400, pattern=NO_NUL,
                                                description="column:value")] = None,
               start: Annotated[str | None, Query(max_length=64)] = None,
               end: Annotated[str | None, Query(max_length=64)] = None,
               predicate: Annotated[str | None, Query(max_length=4000, pattern=NO_NUL)] = None) -> dict:
        selection: dict[str, Any] = {"stream": stream, "start": start, "end": end, "predicate": predicate}
        if ids:
            selection["ids"] = _source_ids(ids)
        if key:
            col, sep, value = key.partition(":")
            if not sep:
                raise HTTPException(422, f"key must be column:value, got {key!r}")
            selection["key"] = {col: value}
        return acting(engine.forward_lookup, {k: v for k, v in selection.items() if v not in (None, "")})

    @r.get("/api/events/{eid}/support", response_model=Answer)
    def support(eid: Annotated[str, ...]) -> dict:
        if "\x00" in eid:
            raise HTTPException(404, "no such event (the id contains a NUL character)")
        return acting(engine.alert_support, eid)

    return r


def _source_ids(text: str) -> list[int]:
    """``ids=1,-2, 3`` as integers; a part that is no integer is a 422 naming it."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise HTTPException(422, f"ids: {part!r} is not an integer source id") from None
    return out
