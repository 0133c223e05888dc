"""Response models of the HTTP API: the published OpenAPI schema (``/openapi.json``)
describes every answer, so a client (and the schemathesis fuzz test) can validate it.

Each model names the fields a client may rely on, with their types; models accept
extra fields (``extra="allow"``), so a view may add information without breaking the
schema, but never drop or retype a declared one. Errors have one shape for every
status: ``{"detail": <reason in words, or FastAPI's list of validation errors>}``, plus
``error_id`` on a 500 (the id under which the server's log holds the details).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Problem(_Open):
    """Any error answer (4xx, 5xx)."""

    detail: str | list[dict[str, Any]]
    error_id: str | None = None


class EventSummary(_Open):
    event: str
    eid: str
    ts: str | None
    attrs: dict[str, Any]


class EventList(_Open):
    events: list[EventSummary]
    limit: int
    offset: int
    count: int


class Task(_Open):
    """One recall task of the Recall Manager (M fig. 9)."""

    task_id: str
    eid: str
    operator: str
    state: str
    tickets: float | None
    chunks_done: int
    chunks_total: int | None


class OperatorResult(_Open):
    """One recall operator's current result after revisions (M 4.6) and its history."""

    similarity: bool
    current: list[dict[str, Any]]
    covered: list[str | None] | None
    history: list[dict[str, Any]]


class Similar(_Open):
    operator: str
    eid: str
    score: float | None
    ts: str | None
    incident: str | None = Field(None, description="the past incident (eid of its first window) this window represents")
    windows: int | None = Field(None, description="how many windows the past incident had")


class Provenance(_Open):
    available: bool
    sources: list[dict[str, Any]]


class EventDetail(EventSummary):
    context: Any = None
    surrounding: Any = None
    novel: bool | None = Field(None, description="true when no past incident is similar enough (similarity.novelty); "
                                                 "null until the search has judged")
    similar: list[Similar]
    results: dict[str, OperatorResult]
    progress: list[Task]
    boundary: dict[str, Any] | None
    provenance: Provenance
    revisions: list[dict[str, Any]] = Field(default_factory=list, description=(
        "a pattern match's MEASURES revisions, oldest first: {retraction, before, after, at}, the "
        "measures a correction changed with their values before and after"))
    engine_running: bool


class SteerResult(_Open):
    """What a cancel or accelerate changed."""

    eid: str
    action: str
    changed: bool
    message: str
    tasks: list[Any]


class SteerManyResult(_Open):
    """What a bulk cancel changed: cancelled tasks per event, events with nothing open."""

    action: str
    changed: bool
    cancelled: int
    events: dict[str, int]
    not_open: list[str]
    message: str


class Chunk(_Open):
    stream: str
    chunk_id: int
    start: str | None
    end: str | None
    tier: str
    rows: int
    late_rows: int


class ChunkCatalog(_Open):
    chunks: list[Chunk]
    count: int


class SchedulerTasks(_Open):
    engine_running: bool
    tasks: list[Task]
    running_queries: int


class Status(_Open):
    engine_running: bool
    token_required: bool
    archive: dict[str, Any]


class Session(BaseModel):
    """``POST /api/session``: the CSRF token of the session whose cookie came with it."""

    csrf: str


class AuditRecord(BaseModel):
    id: int
    at: str
    actor: str
    action: str
    target: str | None = None
    detail: dict[str, Any] | None = None


class AuditLog(BaseModel):
    """``GET /api/audit``: who changed what, newest first (:mod:`moirae.api.audit`)."""

    records: list[AuditRecord]


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error statuses, all :class:`Problem`."""
    return {s: {"model": Problem} for s in statuses}


class Received(BaseModel):
    """What a receiver stored of one posted batch (``POST /api/receive/alertmanager/{name}``)."""

    stored: int = Field(description="alerts of the body written to the receiver's inbox")
