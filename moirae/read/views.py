"""JSON views of an engine's state, for the HTTP API and the console.

Every function takes an ``engine``: a :class:`~moirae.read.abc.ReadSurface`, either a
running :class:`moirae.Engine` or a :class:`moirae.read.readonly.ReadOnlyEngine` over
the database of one that is not running in this process (then it is not steerable: no
live progress, no steering). They read only what the surface declares: the event log,
the recall results table, the Recall Manager's task statistics, the chunk catalog and
the event-query's provenance graph (Ananke's ``GraphStore``).

Recall outputs are treated generically (M 4.6): per operator, inserts, updates and
deletes keyed by ``key`` are replayed in ``seq`` order into the operator's *current*
result; the revision history is returned beside it. An operator whose rows carry a past
event and a ``score`` is a Similarity Recall (M 3.4); its current rows are the similar
past events.

>>> from recall.api import Output, OutputKind
>>> from datetime import UTC, datetime
>>> t = datetime(2024, 1, 1, tzinfo=UTC)
>>> outs = [Output("r", "e1", t, OutputKind.INSERT, 0, "a", {"n": 1}, None),
...         Output("r", "e1", t, OutputKind.INSERT, 1, "b", {"n": 2}, None),
...         Output("r", "e1", t, OutputKind.UPDATE, 2, "a", {"n": 3}, None),
...         Output("r", "e1", t, OutputKind.DELETE, 3, "b", {"n": 2}, None)]
>>> res = apply_revisions(outs)
>>> res["r"]["current"], len(res["r"]["history"])
([{'key': 'a', 'row': {'n': 3}}], 4)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from moirae.read.search_view import searches
from recall.api import Output, OutputKind
from recall.outputs import jsonable
from recall.revision_ops import apply_revision

#: Row fields that may name the past event of a Similarity Recall output, in order.
PAST_EID_FIELDS = ("past_eid", "similar_eid", "past_id", "eid")
SCORE_FIELDS = ("score", "similarity", "cosine")
STATUS_KEY = "__status__"


# -- steering availability -----------------------------------------------------------

def running(engine) -> bool:
    """Whether steering can act: an in-process engine with a Recall Manager."""
    return engine.steerable()


# -- events --------------------------------------------------------------------------

def event_summary(record) -> dict[str, Any]:
    """One event of the log, as the list shows it."""
    out = {"event": record.event, "eid": record.eid, "ts": _iso(record.ts), "attrs": jsonable(record.attrs)}
    if getattr(record, "monitor", None) is not None:  # raised by a monitor: which one, which version
        out.update(monitor=record.monitor, version=record.version)
    return out


def event_list(engine, event: str | None = None, since: datetime | None = None, until: datetime | None = None,
               limit: int = 50, offset: int = 0, suppressed: bool | None = None) -> dict[str, Any]:
    """Events newest first, filtered by event-query name and ``since <= ts < until``, and
    with ``suppressed`` by whether a rule suppresses them now (:mod:`moirae.rules`); each
    judged by a rule carries its ``disposition`` and whether it is ``final``."""
    if suppressed is None:
        records = engine.events.list(event, since, until, limit, offset)
    else:
        from moirae.ingest.events import EventRecord

        rows = engine.dispositions.list_events(suppressed, event, since, until, limit, offset)
        records = [EventRecord(*r[:4], context=r[4], surrounding=r[5]) for r in rows]
    store = getattr(engine, "dispositions", None)
    judged = store.of(r.eid for r in records) if records and store is not None else {}
    return {"events": [{**event_summary(r), **judged.get(r.eid, {})} for r in records], "limit": limit,
            "offset": offset, "count": len(records)}


def event_detail(engine, eid: str) -> dict[str, Any] | None:
    """Everything about one event (``GET /api/events/{eid}``), or None if
    the event log has no such eid."""
    record = engine.events.get(eid)
    if record is None:
        return None
    # outputs reach the results table's queue before the bus: after a flush, the detail
    # holds everything a live-stream client has already seen
    engine.results.flush(5.0)
    outputs = engine.results.read(eid)
    results = apply_revisions(outputs)
    for name in engine.similarity_operators() & set(results):
        results[name]["similarity"] = True
    boundary = next((o for o in reversed(outputs) if o.kind is OutputKind.BOUNDARY), None)
    return {
        **event_summary(record),
        "context": jsonable(record.context),
        "surrounding": jsonable(record.surrounding),
        "similar": similar_events(engine, results),
        "similar_status": similarity_status(results),
        "novel": (similarity_status(results) or {}).get("novel"),  # None until the search ends
        "incident": _incident_of(engine, eid),
        # the rules' verdict and its changes (moirae.rules)
        "disposition": engine.dispositions.get(eid) if hasattr(engine, "dispositions") else None,
        "results": results,
        "progress": (tasks := progress(engine, eid)),
        "searches": searches(tasks, results),  # how far back each search went, what remains
        "boundary": None if boundary is None else {"seq": boundary.seq, **jsonable(dict(boundary.row))},
        "provenance": provenance(engine, record),
        "revisions": measure_revisions(engine, eid),
        "engine_running": running(engine),
    }


def measure_revisions(engine, eid: str) -> list[dict[str, Any]]:
    """A pattern match's MEASURES revisions, oldest first: each correction that changed a
    value the match reports, with the values before and after
    (:mod:`moirae.retract.patterns`); none for other events."""
    db = getattr(engine, "db", None)
    if db is None:
        return []
    from moirae.retract.patterns import measure_revisions as read

    return jsonable(read(db, eid))


def _incident_of(engine, eid: str) -> str | None:
    return engine.incidents.incident_of([eid]).get(eid)


# -- recall outputs: revisions into current results ---------------------------------

def output_json(o: Output) -> dict[str, Any]:
    """One recall output (a tuple, a revision or a boundary) as JSON."""
    return {"type": "output", "operator": o.operator, "eid": o.eid, "event_ts": _iso(o.event_ts),
            "kind": o.kind.value, "seq": o.seq, "key": o.key, "row": jsonable(dict(o.row)),
            "covered": _interval(o.covered)}


def apply_revisions(outputs: Iterable[Output]) -> dict[str, dict[str, Any]]:
    """Per operator: the current result after replaying inserts / updates / deletes by
    key in ``seq`` order, the interval of history it covers, whether it is a Similarity
    Recall, and the revision history. Boundary outputs are not an operator's rows."""
    by_op: dict[str, list[Output]] = {}
    for o in outputs:
        if o.kind is not OutputKind.BOUNDARY:
            by_op.setdefault(o.operator, []).append(o)
    out: dict[str, dict[str, Any]] = {}
    for op, outs in by_op.items():
        outs.sort(key=lambda o: o.seq)
        current: dict[str, dict] = {}
        covered = None
        for o in outs:
            apply_revision(current, o)
            if o.covered is not None:
                covered = o.covered
        rows = [{"key": k, "row": jsonable(r)} for k, r in current.items()]
        out[op] = {
            "similarity": any(_is_similarity_row(dict(o.row)) for o in outs),
            "current": rows,
            "covered": _interval(covered),
            "history": [{"seq": o.seq, "kind": o.kind.value, "key": o.key, "row": jsonable(dict(o.row)),
                         "covered": _interval(o.covered)} for o in outs],
        }
    return out


def _is_similarity_row(row: dict) -> bool:
    return any(f in row for f in SCORE_FIELDS) and any(f in row for f in PAST_EID_FIELDS)


def similar_events(engine, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The current similar past events of every Similarity Recall operator, best first:
    the past event's id, time, score, context and resolution. Context and resolution
    come from the output row when it carries them, else from the past event's record
    (its context, and its *surrounding* information, M 3.3, as the resolution)."""
    out = []
    for op, res in results.items():
        if not res["similarity"]:
            continue
        for item in res["current"]:
            row = item["row"]
            if not _is_similarity_row(row):  # e.g. the operator's status row (how its search ended)
                continue
            past_eid = next((str(row[f]) for f in PAST_EID_FIELDS if row.get(f) is not None), item["key"])
            past = engine.events.get(past_eid)
            score = next((row[f] for f in SCORE_FIELDS if row.get(f) is not None), None)
            resolution = row.get("resolution") or row.get("surrounding") or None
            if resolution is None and past is not None:
                resolution = past.attrs.get("resolution") or (jsonable(past.surrounding) or None)
            out.append({
                "operator": op, "eid": past_eid, "score": score,
                "ts": row.get("past_ts", row.get("ts")) or (_iso(past.ts) if past else None),
                "context": row["context"] if "context" in row else (jsonable(past.context) if past else None),
                "resolution": jsonable(resolution),
                "incident": str(row.get("incident") or past_eid), "windows": row.get("windows"),
                "event": None if past is None else event_summary(past),
                "extra": {k: jsonable(v) for k, v in row.items() if k not in _SHOWN},
            })
    _recorded_resolutions(engine, out)
    out.sort(key=lambda s: -s["score"] if isinstance(s["score"], int | float) and math.isfinite(s["score"])
             else math.inf)
    return out


_SHOWN = {*PAST_EID_FIELDS, *SCORE_FIELDS, "past_ts", "ts", "context", "resolution", "surrounding"}


def _recorded_resolutions(engine, similar: list[dict[str, Any]]) -> None:
    """A resolution recorded by on-call for a past incident (``POST .../resolve``) is
    that incident's resolution (M 3.3): it replaces what the archive says."""
    if not similar:
        return
    store = engine.incidents
    ids = {s["eid"] for s in similar} | {str(s["extra"]["incident"]) for s in similar if s["extra"].get("incident")}
    notes = store.resolutions(ids)
    for s in similar:
        note = notes.get(str(s["extra"].get("incident") or "")) or notes.get(s["eid"])
        if note:
            s["resolution"], s["resolution_recorded"] = note, True


def similarity_status(results: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The status row of the Similarity Recall (how its search ended, whether the
    event is novel), when it has emitted one."""
    for res in results.values():
        if res["similarity"]:
            for item in res["current"]:
                if item["key"] == STATUS_KEY:
                    return {**item["row"], "covered": res["covered"]}
    return None


# -- progress and the scheduler -------------------------------------------------------

def progress(engine, eid: str) -> list[dict[str, Any]]:
    """Per recall task of ``eid``: chunks done out of total, tickets, state (empty when
    no engine runs in this process, or once the task statistics are reaped)."""
    return [t.as_dict() for t in engine.tasks(eid)]


def scheduler_tasks(engine) -> dict[str, Any]:
    """Every recall task the manager knows (open, and recently ended), with its event."""
    state = engine.scheduler_state()
    if state is None:
        return {"engine_running": False, "tasks": [], "running_queries": 0}
    return {"engine_running": True, "tasks": [t.as_dict() for t in engine.tasks()], **state}


# -- the archive ----------------------------------------------------------------------

def chunk_catalog(engine, stream: str | None = None) -> dict[str, Any]:
    """The chunk catalog: per chunk its stream, interval, tier, rows, late rows,
    indexes and materializations, newest first."""
    chunks = engine.archive.chunks(stream)
    return {"chunks": [{"stream": c.stream, "chunk_id": c.chunk_id, "start": _iso(c.start), "end": _iso(c.end),
                        "tier": c.tier.value, "rows": c.rows, "late_rows": c.late_rows,
                        "indexes": list(c.indexes), "materialized": list(c.materialized)} for c in chunks],
            "count": len(chunks)}


# -- provenance (A 3, 5) ------------------------------------------------------------

def provenance(engine, record) -> dict[str, Any]:
    """The source tuples that contributed to the event (backward provenance through
    the event-query's Ananke graph) and, per tuple, whether it is expired (A 3: it can
    contribute to no future alert). The tuples' payload is read back from the archive."""
    graph = engine.provenance_graph(record.event)
    if graph is None:
        return {"available": False, "sources": []}
    inputs = engine.event_inputs(record.event)
    rows = _source_rows(graph, inputs[0] if inputs is not None else "eid", record.eid)
    # "sid" is the id as text: a 64-bit source id is beyond a JavaScript number's exact range
    sources = [{"source_id": sid, "sid": str(sid), "ts": _iso(ts), "expired": expired, "stream": None, "row": None}
               for sid, ts, expired in rows]
    if sources:
        streams = inputs[1] if inputs is not None else [s.name for s in engine.archive.streams() if s.kind == "raw"]
        _attach_tuples(engine.archive, streams, sources, [r[1] for r in rows])
    return {"available": True, "sources": sources,
            "expired": sum(s["expired"] for s in sources), "alive": sum(not s["expired"] for s in sources)}


def _source_rows(graph, eid_col: str, eid: str) -> list[tuple[int, datetime, bool]]:
    """(source id, event time, expired) of every source tuple with an edge to a sink
    vertex of this event, from the GraphStore's vertex, edge and label tables."""
    conn = graph.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT DISTINCT v.id, v.tuple_ts, (l.vertex_id IS NOT NULL) "
                f"FROM {graph.v} s JOIN {graph.e} e ON e.sink_id = s.id "
                f"JOIN {graph.v} v ON v.kind = 'source' AND v.id = e.source_id "
                f"LEFT JOIN {graph.lab} l ON l.kind = 'source' AND l.vertex_id = v.id "
                f"WHERE s.kind = 'sink' AND s.payload ->> %s = %s ORDER BY v.tuple_ts, v.id", (eid_col, eid))
            return [(r[0], r[1], bool(r[2])) for r in cur.fetchall()]
    finally:
        conn.close()


def _attach_tuples(archive, streams: list[str], sources: list[dict], times: list[datetime]) -> None:
    wanted = {s["source_id"]: s for s in sources}
    lo, hi = min(times), max(times) + timedelta(microseconds=1)
    for stream in streams:
        try:
            frame = archive.read(stream, lo, hi, with_ids=True)
        except LookupError:  # the stream is unknown to this archive
            continue
        for row in frame.to_dict("records"):
            s = wanted.get(int(row.pop("_sid")))
            if s is not None and s["stream"] is None:
                s["stream"], s["row"] = stream, jsonable(row)


# -- the live stream (SSE items) ---------------------------------------------------------

def bus_item_json(item: Any) -> dict[str, Any]:
    """A bus item as JSON: recall outputs and boundaries via :func:`output_json`, event
    announcements (dicts) as they are."""
    if isinstance(item, Output):
        return output_json(item)
    if isinstance(item, dict):
        return jsonable(item)
    return {"type": "other", "value": jsonable(item)}


def _iso(value: Any) -> str | None:
    return None if value is None else jsonable(value)


def _interval(iv) -> list[str | None] | None:
    return None if iv is None else [_iso(iv.start), _iso(iv.end)]
