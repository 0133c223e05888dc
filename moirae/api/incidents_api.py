"""Incident routes of the HTTP API, with Pydantic response models (the
OpenAPI schema the API is fuzzed against):

- ``GET /api/incidents?status=&type=&limit=&offset=``: incidents newest first;
- ``GET /api/incidents/{id}``: one incident, its events, norm, current value, series;
- ``POST /api/incidents/{id}/acknowledge`` (optional body ``{"by": name}``);
- ``POST /api/incidents/{id}/resolve`` with ``{"note": how it was resolved, "by": name}``:
  the note becomes the incident's resolution, shown in future similar-incident lists;
- ``GET /api/archive/summary``: chunks per stream and tier, rows, late rows, dead letters.

Mutating calls follow the access rules of :mod:`moirae.api.access` and are audited
(:mod:`moirae.api.audit`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from moirae.api.audit import audit_request
from moirae.incidents.store import MAX_NOTE, IncidentError, NoSuchIncident
from moirae.read.archive_view import dead_letters
from moirae.read.incident_views import incident_detail

Status = Literal["open", "acknowledged", "resolved"]
NO_NUL = r"^[^\x00]*$"
#: A note says something: at least one character that is not whitespace (Python's
#: str.isspace, which the store checks: Unicode White_Space plus \x1c-\x1f). Stated in the
#: schema; the store's own check answers a blank note in words.
NOTE = r"^[^\x00]*[^\x00\s\x1c-\x1f][^\x00]*$"


class Incident(BaseModel):
    id: str
    event: str
    key: str
    status: Status
    start: str = Field(description="time of the first alert (its window's end), ISO 8601")
    last_event: str
    duration_s: float = Field(description="from the first alert's window start to the last alert")
    alerts: int
    severity: float | None = Field(None, description="largest distance to the norm, in sd")
    severity_label: Literal["unknown", "minor", "major", "critical"]
    resolution: str | None = None
    acknowledged_by: str | None = None
    acknowledged_at: str | None = None
    resolved_by: str | None = None
    resolved_at: str | None = None
    updated_at: str | None = None


class IncidentEvent(BaseModel):
    eid: str
    ts: str
    value: float | None = None
    z: float | None = None


class Norm(BaseModel):
    operator: str
    metric: str
    mean: float
    sd: float
    n: int | None = None
    covered: list[str | None] | None = None
    revisions: int


class Current(BaseModel):
    eid: str
    ts: str
    value: float
    z: float | None = None


class Series(BaseModel):
    stream: str
    column: str
    start: str
    end: str
    points: list[tuple[str, float]]


class IncidentDetail(Incident):
    events: list[IncidentEvent]
    metric: str | None = None
    threshold: float | None = None
    keys: list[str]
    window_s: float
    norm: Norm | None = None
    current: Current | None = None
    series: Series | None = None


class IncidentList(BaseModel):
    incidents: list[Incident]
    total: int
    limit: int
    offset: int


class AcknowledgeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: Annotated[str | None, Field(max_length=200, pattern=NO_NUL)] = None


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: Annotated[str, Field(min_length=1, max_length=MAX_NOTE, pattern=NO_NUL, json_schema_extra={"pattern": NOTE},
                               description="how the incident was resolved")]
    by: Annotated[str | None, Field(max_length=200, pattern=NO_NUL)] = None


class StreamTier(BaseModel):
    stream: str
    tier: str
    chunks: int
    rows: int
    late_rows: int


class ArchiveSummary(BaseModel):
    tiers: list[StreamTier]
    dead_letters: dict[str, int]


def router(engine, require_token) -> APIRouter:
    r = APIRouter()

    def store():
        return engine.incidents

    def known(incident: str) -> str:
        if "\x00" in incident:
            raise HTTPException(404, "no such incident (the id contains a NUL character)")
        return incident

    def acting(fn, *args):
        try:
            return fn(*args)
        except NoSuchIncident as exc:
            raise HTTPException(404, str(exc)) from None
        except IncidentError as exc:
            raise HTTPException(422, str(exc)) from None

    @r.get("/api/incidents", response_model=IncidentList)
    def list_incidents(status: Status | None = None,
                       type: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,  # noqa: A002
                       limit: Annotated[int, Query(ge=1, le=500)] = 50,
                       offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> dict:
        rows, total = acting(store().list, status, type or None, limit, offset)
        return {"incidents": rows, "total": total, "limit": limit, "offset": offset}

    @r.get("/api/incidents/{incident}", response_model=IncidentDetail)
    def get_incident(incident: str) -> dict:
        return acting(incident_detail, engine, known(incident))

    @r.post("/api/incidents/{incident}/acknowledge", response_model=Incident, dependencies=[Depends(require_token)])
    def acknowledge(request: Request, incident: str, body: Annotated[AcknowledgeBody | None, Body()] = None) -> dict:
        by = (body or AcknowledgeBody()).by
        out = acting(store().acknowledge, known(incident), by)
        audit_request(request, "acknowledge", incident, by=by)
        return out

    @r.post("/api/incidents/{incident}/resolve", response_model=Incident, dependencies=[Depends(require_token)])
    def resolve(request: Request, incident: str, body: ResolveBody) -> dict:
        out = acting(store().resolve, known(incident), body.note, body.by)
        audit_request(request, "resolve", incident, {"note": body.note[:500]}, by=body.by)
        return out

    @r.get("/api/archive/summary", response_model=ArchiveSummary)
    def archive_summary() -> dict:
        per: dict[tuple[str, str], dict] = {}
        for c in engine.archive.chunks():
            s = per.setdefault((c.stream, c.tier.value), {"stream": c.stream, "tier": c.tier.value, "chunks": 0,
                                                            "rows": 0, "late_rows": 0})
            s["chunks"] += 1
            s["rows"] += c.rows or 0
            s["late_rows"] += c.late_rows or 0
        return {"tiers": sorted(per.values(), key=lambda s: (s["stream"], s["tier"])),
                "dead_letters": dead_letters(engine.archive)}

    return r
