"""Whether an alert's support is still in the archive, and its status.

An alert's support is the set of source rows with a provenance edge to it (A 3). Under
the ``contributing_only`` retention policy a chunk whose rows are all expired and feed
no alert that stands may be dropped (``archive/tiers.py:apply_retention``), so the
support of a retracted alert may leave the archive; the console shows what is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from archive.names import quote
from archive.schema import table_exists
from moirae.retract.lookup import QueryGraph, sources_of_events


def alert_support(db, archive, graphs: Mapping[str, QueryGraph], event: str | None, eid: str) -> dict[str, Any]:
    """``status`` (active / retracted), ``reason``, ``retraction``, and the support:
    ``sources`` (rows with an edge to the alert), ``in_archive`` (those the archive
    still holds), ``in_archive_all``; ``available`` is False without a graph."""
    status = _status(db, eid)
    out: dict[str, Any] = {"eid": eid, "event": event, **status}
    qg = graphs.get(event) if event is not None else None
    if qg is None:
        return {**out, "available": False, "sources": 0, "in_archive": 0, "in_archive_all": None}
    sids = sorted(sources_of_events(qg, [eid]).get(eid, set()))
    held = 0
    streams = qg.inputs or tuple(s.name for s in archive.streams() if s.kind == "raw")
    with db.connection() as conn, conn.cursor() as cur:
        for stream in streams:
            if sids and table_exists(cur, quote(stream)):
                cur.execute(f"SELECT count(*) FROM {quote(stream)} WHERE _sid = ANY(%s)", (sids,))
                held += cur.fetchone()[0]
    return {**out, "available": True, "sources": len(sids), "in_archive": held,
            "in_archive_all": held >= len(sids)}


def _status(db, eid: str) -> dict[str, Any]:
    with db.connection() as conn, conn.cursor() as cur:
        if not table_exists(cur, "moirae_alert_status"):
            return {"status": "active", "reason": None, "retraction": None}
        cur.execute("SELECT status, reason, retraction FROM moirae_alert_status WHERE eid = %s", (eid,))
        row = cur.fetchone()
    if row is None:
        return {"status": "active", "reason": None, "retraction": None}
    return {"status": row[0], "reason": row[1], "retraction": row[2]}
