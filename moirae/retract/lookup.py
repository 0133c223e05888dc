"""Forward lookup: which alerts source rows fed, which are still open, and whether any
future alert can still use them (A 3: forward provenance and the expired label).

The provenance graph spans every event-query: each deployed event-query keeps its
Ananke graph (``ananke/store.py:GraphStore``), whose source vertices are the archive's
source ids (A 5), so one source row has one id in all of them. :func:`forward` asks
every graph for the sink vertices the rows have an edge to, names each sink by its
event id (the sink tuple's eid column), and joins the event log, the incidents and the
alert statuses (:class:`moirae.retract.store.RetractionStore`).

A row is *expired* when no future alert can use it: its time is behind its stream's
expiry horizon (``min_K(W_K) - U``, A 5.1, as the archive records it), or every
event-query reading its stream has labelled it expired.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from archive.schema import table_exists

#: at most this many source rows are listed one by one in an answer (all are counted)
MAX_LISTED = 500


@dataclass(frozen=True)
class QueryGraph:
    """One event-query's provenance graph, with what a lookup needs to read it."""

    event: str
    graph: Any  # ananke.store.GraphStore
    eid_col: str
    inputs: tuple[str, ...]
    ts_col: str = "ts"


def sinks_of(qg: QueryGraph, source_ids: Sequence[int]) -> tuple[list[tuple[int, int, datetime, str]], set[int]]:
    """``(source id, sink id, sink time, eid)`` of every edge from ``source_ids`` in
    ``qg``'s graph, and which of ``source_ids`` it labelled expired."""
    g = qg.graph
    conn = g.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT e.source_id, s.id, s.tuple_ts, s.payload ->> %s FROM {g.e} e "
                        f"JOIN {g.v} s ON s.kind = 'sink' AND s.id = e.sink_id WHERE e.source_id = ANY(%s)",
                        (qg.eid_col, list(source_ids)))
            edges = [(int(a), int(b), t, str(eid)) for a, b, t, eid in cur.fetchall()]
            cur.execute(f"SELECT vertex_id FROM {g.lab} WHERE kind = 'source' AND vertex_id = ANY(%s)",
                        (list(source_ids),))
            labelled = {int(r[0]) for r in cur.fetchall()}
    finally:
        conn.close()
    return edges, labelled


def sink_ids_of(qg: QueryGraph, eids: Iterable[str]) -> dict[int, str]:
    """The sink vertices (sink id -> eid) of events ``eids`` in ``qg``'s graph."""
    g = qg.graph
    conn = g.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, payload ->> %s FROM {g.v} WHERE kind = 'sink' AND payload ->> %s = ANY(%s)",
                        (qg.eid_col, qg.eid_col, list(eids)))
            return {int(i): str(e) for i, e in cur.fetchall()}
    finally:
        conn.close()


def sink_payloads(qg: QueryGraph, eids: Iterable[str]) -> dict[int, tuple[str, dict[str, Any]]]:
    """The sink vertices of events ``eids`` in ``qg``'s graph: sink id -> (eid, the sink tuple as stored)."""
    g = qg.graph
    conn = g.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, payload FROM {g.v} WHERE kind = 'sink' AND payload ->> %s = ANY(%s)",
                        (qg.eid_col, list(eids)))
            return {int(i): (str(p.get(qg.eid_col)), dict(p)) for i, p in cur.fetchall()}
    finally:
        conn.close()


def sources_of_events(qg: QueryGraph, eids: Iterable[str]) -> dict[str, set[int]]:
    """Per event id: the source ids with an edge to one of its sink vertices (backward, A 3)."""
    g = qg.graph
    conn = g.connect()
    out: dict[str, set[int]] = {}
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT s.payload ->> %s, e.source_id FROM {g.v} s JOIN {g.e} e ON e.sink_id = s.id "
                        "WHERE s.kind = 'sink' AND s.payload ->> %s = ANY(%s)", (qg.eid_col, qg.eid_col, list(eids)))
            for eid, sid in cur.fetchall():
                out.setdefault(str(eid), set()).add(int(sid))
    finally:
        conn.close()
    return out


def affected(graphs: Iterable[QueryGraph], source_ids: Sequence[int]) -> dict[str, str]:
    """The alerts (eid -> event-query) ``source_ids`` fed, over every graph (forward, A 3)."""
    out: dict[str, str] = {}
    if not source_ids:
        return out
    for qg in graphs:
        edges, _ = sinks_of(qg, source_ids)
        for _, _, _, eid in edges:
            out[eid] = qg.event
    return out


def forward(graphs: Sequence[QueryGraph], db, rows: Sequence[tuple[str, int, datetime]],
            horizon, statuses: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The forward-lookup answer for ``rows`` ((stream, source id, time) each).

    ``horizon(stream)`` is the stream's expiry horizon (or None); ``statuses`` the
    alert statuses by eid (``moirae_alert_status``), read here when None."""
    ids = [sid for _, sid, _ in rows]
    fed: dict[int, list[str]] = {sid: [] for sid in ids}
    labelled: dict[int, set[str]] = {sid: set() for sid in ids}
    alerts: dict[str, dict[str, Any]] = {}
    for qg in graphs:
        edges, lab = sinks_of(qg, ids) if ids else ([], set())
        for sid, _sink, ts, eid in edges:
            if eid not in fed[sid]:
                fed[sid].append(eid)
            alerts.setdefault(eid, {"event": qg.event, "eid": eid, "ts": ts.isoformat()})
        for sid in lab:
            labelled[sid].add(qg.event)
    horizons = {s: horizon(s) for s in {s for s, _, _ in rows}}
    readers = {s: {qg.event for qg in graphs if s in qg.inputs} for s in horizons}
    sources = []
    for stream, sid, ts in rows:
        h = horizons[stream]
        expired = (h is not None and ts < h) or bool(readers[stream]) and readers[stream] <= labelled[sid]
        sources.append({"stream": stream, "source_id": sid, "ts": ts.isoformat(), "expired": bool(expired),
                        "alerts": fed[sid]})
    _attach_status(db, alerts, statuses)
    listed = sorted(alerts.values(), key=lambda a: (a["ts"], a["eid"]))
    return {"sources": sources[:MAX_LISTED], "alerts": listed,
            "counts": {"sources": len(sources), "expired": sum(s["expired"] for s in sources),
                       "alive": sum(not s["expired"] for s in sources),
                       "feeding": sum(bool(s["alerts"]) for s in sources),
                       "alerts": len(listed), "open": sum(a["open"] for a in listed),
                       "retracted": sum(a["status"] == "retracted" for a in listed)},
            "can_feed_future_alerts": any(not s["expired"] for s in sources)}


def _attach_status(db, alerts: dict[str, dict[str, Any]], statuses: dict[str, dict[str, Any]] | None) -> None:
    """Each alert's status (active / retracted, with the reason), its incident and
    whether it is open: not retracted and its incident not resolved."""
    if not alerts:
        return
    eids = list(alerts)
    with db.connection() as conn, conn.cursor() as cur:
        if statuses is None:
            statuses = {}
            if table_exists(cur, "moirae_alert_status"):
                cur.execute("SELECT eid, status, reason, retraction FROM moirae_alert_status WHERE eid = ANY(%s)",
                            (eids,))
                statuses = {e: {"status": s, "reason": r, "retraction": rid} for e, s, r, rid in cur.fetchall()}
        incidents: dict[str, tuple[str, str]] = {}
        if table_exists(cur, "moirae_incident_events"):
            cur.execute("SELECT x.eid, i.id, i.status FROM moirae_incident_events x JOIN moirae_incidents i "
                        "ON i.id = x.incident WHERE x.eid = ANY(%s)", (eids,))
            incidents = {e: (i, s) for e, i, s in cur.fetchall()}
    for eid, a in alerts.items():
        st = statuses.get(eid) or {}
        a["status"] = st.get("status") or "active"
        a["reason"] = st.get("reason")
        a["retraction"] = st.get("retraction")
        inc = incidents.get(eid)
        a["incident"], a["incident_status"] = (inc if inc else (None, None))
        a["open"] = a["status"] != "retracted" and a["incident_status"] != "resolved"
