"""What an alert carries: the event, its incident and its top similar past incidents
with their resolutions (M 3.4-3.5), read from the recall results table.

The similar incidents are the Similarity Recall's current rows (its revisions applied
in order, M 4.6: ``recall/revision_ops.py:apply_revision``), best score first. A
resolution recorded by on-call for a past incident replaces what the archive says
(M 3.3), as on the console.
"""

from __future__ import annotations

import math
from typing import Any

from recall.api import OutputKind
from recall.outputs import jsonable
from recall.revision_ops import apply_revision

PAST_EID_FIELDS = ("past_eid", "similar_eid", "past_id", "eid")
STATUS_KEY = "__status__"
SCORE_FIELDS = ("score", "similarity", "cosine")


def similar_rows(outputs) -> tuple[list[dict[str, Any]], bool]:
    """The current similarity rows of ``outputs`` (one event's recall outputs), best
    first, and whether its recall has ended (a BOUNDARY is among them)."""
    by_op: dict[str, dict[str, Any]] = {}
    ended = False
    for o in sorted(outputs, key=lambda o: (o.operator, o.seq)):
        if o.kind is OutputKind.BOUNDARY:
            ended = True
            continue
        apply_revision(by_op.setdefault(o.operator, {}), o)
    rows = []
    for current in by_op.values():
        for key, row in current.items():
            if key == STATUS_KEY:
                continue
            past = next((row[f] for f in PAST_EID_FIELDS if row.get(f) is not None), key)
            score = next((row[f] for f in SCORE_FIELDS if row.get(f) is not None), None)
            if not isinstance(score, int | float) or isinstance(score, bool):
                continue
            rows.append({"eid": str(past), "incident": str(row.get("incident") or past),
                         "score": float(score) if math.isfinite(score) else None,
                         "resolution": jsonable(row.get("resolution") or row.get("surrounding") or None)})
    rows.sort(key=lambda r: -(r["score"] or 0.0))
    return rows, ended


def describe(eid: str, event_json: dict[str, Any], results, incidents, top: int = 3) -> dict[str, Any]:
    """The alert of event ``eid`` (``event_json`` as the bus published it)."""
    results.flush(5.0)  # outputs reach the table's queue before the bus: write what the bus has shown
    rows, ended = similar_rows(results.read(eid))
    rows = rows[:top]
    if rows:
        notes = incidents.resolutions({r["incident"] for r in rows} | {r["eid"] for r in rows})
        for r in rows:
            note = notes.get(r["incident"]) or notes.get(r["eid"])
            if note:
                r["resolution"], r["resolution_recorded"] = note, True
    incident = incidents.incident_of([eid]).get(eid)
    return {"event": event_json.get("event"), "eid": eid, "ts": event_json.get("ts"),
            "attrs": event_json.get("attrs") or {}, "context": event_json.get("context"),
            "incident": incident, "similar": rows, "similar_complete": ended}
