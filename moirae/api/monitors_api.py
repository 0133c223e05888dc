"""Monitor routes of the HTTP API (:mod:`moirae.deploy.lifecycle`):

- ``GET /api/monitors``: the deployed monitors: name, version, state, what each
  deployed, rows per second, alerts, open recall tasks, the materialized span;
- ``POST /api/monitors`` with a monitor file's text as the body (``application/yaml``
  or ``text/plain``; or JSON ``{"text": ...}``): deploy it on the running engine; the answer's ``result`` is
  ``deployed``, ``unchanged`` (the same version runs already) or ``updated`` (with the
  ``previous`` version). A bad file is 422 with the message naming its line and key, and
  the engine is left unchanged;
- ``DELETE /api/monitors/{name}?drop_archive=false``: retire it (its streaming queries,
  recall tasks and state); its archive is kept unless ``drop_archive``. Unknown: 404.

Mutations follow the token rule of :mod:`moirae.api.access` and are audited; without
an engine in this process (``moirae console``) they are 409.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from moirae.api.audit import audit_request
from moirae.api.errors import EngineNotRunning
from moirae.deploy.lifecycle import MonitorError, UnknownMonitor

NAME = r"^[^\x00/]{1,200}$"
#: the media types a monitor file may be posted as
MEDIA = ("application/yaml", "text/yaml", "text/plain")


class Materialized(BaseModel):
    from_: str | None = Field(None, alias="from", description="oldest materialized time, ISO 8601")
    until: str | None = Field(None, description="newest materialized time, ISO 8601")
    units: int = 0


class MonitorRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    version: str = Field(description="digest of the monitor's definition")
    state: str = Field(description="deploying, running, failed or stopped")
    deployed_at: str | None = None
    error: str | None = None
    event_queries: list[str] = []
    operators: list[str] = []
    sources: list[str] = []
    rows_per_s: float | None = Field(None, description="input rows per second of its last micro-batch")
    alerts: int | None = Field(None, description="alerts this version raised (event log)")
    open_tasks: int | None = None
    materialized: Materialized | None = None


class MonitorList(BaseModel):
    monitors: list[MonitorRow]


class MonitorChange(BaseModel):
    model_config = ConfigDict(extra="allow")

    result: str = Field(description="deployed, unchanged, updated or undeployed")
    name: str
    version: str
    seconds: float
    previous: str | None = None


def _bad_file_errors() -> tuple[type[BaseException], ...]:
    """The errors that say a monitor file is wrong (422): the monitor files' own, and
    the definition errors an apply raises (its engine left unchanged)."""
    from moirae.queries.hybrid import QueryDefinitionError

    errors: list[type[BaseException]] = [QueryDefinitionError, ValueError, MonitorError]
    try:
        from moirae.monitors import MonitorFileError

        errors.insert(0, MonitorFileError)
    except ImportError:  # monitor files are not part of this build: Python-declared monitors only
        pass
    return tuple(errors)


def router(engine, require_token) -> APIRouter:
    r = APIRouter()

    @r.get("/api/monitors", response_model=MonitorList)
    def list_monitors() -> dict[str, Any]:
        return {"monitors": engine.monitors()}

    @r.post("/api/monitors", response_model=MonitorChange, dependencies=[Depends(require_token)],
            openapi_extra={"requestBody": {"required": True, "description": "a monitor file's text",
                                           "content": {**{t: {"schema": {"type": "string"}} for t in MEDIA},
                                                       "application/json": {"schema": {
                                                           "type": "object", "required": ["text"],
                                                           "properties": {"text": {"type": "string"}}}}}}})
    async def deploy(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HTTPException(422, f"the monitor file is not UTF-8 text: {exc}") from None
        if request.headers.get("content-type", "").split(";")[0].strip() == "application/json":
            try:
                text = json.loads(text)["text"]
            except (ValueError, KeyError, TypeError):
                raise HTTPException(422, 'a JSON body must be {"text": "<the monitor file>"}') from None
            if not isinstance(text, str):
                raise HTTPException(422, 'a JSON body must be {"text": "<the monitor file>"}')
        if not text.strip():
            raise HTTPException(422, "the body is empty: post a monitor file's text")
        if "\x00" in text:
            raise HTTPException(422, "the monitor file contains a NUL character")
        try:
            out = await run_in_threadpool(engine.deploy_text, text)
        except EngineNotRunning as exc:
            raise HTTPException(409, str(exc)) from None
        except _bad_file_errors() as exc:
            raise HTTPException(422, str(exc)) from None
        await run_in_threadpool(audit_request, request, "deploy", out["name"],
                                {"version": out["version"], "result": out["result"]})
        return out

    @r.delete("/api/monitors/{name}", response_model=MonitorChange, dependencies=[Depends(require_token)])
    def undeploy(request: Request, name: Annotated[str, Path(pattern=NAME)],
                 drop_archive: bool = False) -> dict[str, Any]:
        try:
            out = engine.undeploy_monitor(name, drop_archive)
        except UnknownMonitor as exc:
            raise HTTPException(404, str(exc)) from None
        except EngineNotRunning as exc:
            raise HTTPException(409, str(exc)) from None
        audit_request(request, "undeploy", name, {"version": out["version"], "drop_archive": drop_archive})
        return out

    return r
