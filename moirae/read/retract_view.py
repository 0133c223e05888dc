"""Retractions and forward lookup as the read-only console reads them, from the
database alone (:class:`moirae.read.readonly.ReadOnlyEngine`): the same answers as the
running engine's :class:`moirae.engine.retract_methods.RetractMethods`, creating no
table (a database without retractions has none to show).

The provenance graphs are those of the event-queries the event log names, found by
their tables (``ank_<event>_*``); their eid column is taken to be ``eid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from archive.schema import table_exists
from moirae.retract.errors import NoSuchRetraction
from moirae.retract.lookup import QueryGraph, forward
from moirae.retract.selection import Selection, resolve
from moirae.retract.support import alert_support as _support


def query_graphs(engine) -> dict[str, QueryGraph]:
    """The provenance graph of every event-query that logged an event."""
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT DISTINCT event FROM moirae_events")
        events = sorted(r[0] for r in cur.fetchall())
    out = {}
    for ev in events:
        g = engine.provenance_graph(ev)
        if g is not None:
            inputs = engine.event_inputs(ev)
            out[ev] = QueryGraph(ev, g, inputs[0] if inputs else "eid", tuple(inputs[1]) if inputs else ())
    return out


def lookup(engine, selection: Mapping[str, Any]) -> dict[str, Any]:
    """Forward lookup of the rows ``selection`` names (:func:`moirae.retract.lookup.forward`)."""
    sel = Selection.from_json(selection, allow_stream=True)
    rows = resolve(engine.archive, sel)
    return {"selection": sel.to_json(), **forward(list(query_graphs(engine).values()), engine.db,
                                                   [(s, i, t) for s, i, t, _ in rows], engine.archive.horizon)}


def alert_support(engine, eid: str) -> dict[str, Any]:
    """Alert ``eid``'s status and whether its support is still in the archive."""
    record = engine.events.get(eid)
    return _support(engine.db, engine.archive, query_graphs(engine), record.event if record else None, eid)


def _exists(engine) -> bool:
    with engine.db.connection() as conn, conn.cursor() as cur:
        return table_exists(cur, "moirae_retractions")


def retraction_list(engine, limit: int = 100) -> list[dict[str, Any]]:
    """The retractions, newest first (none when the table does not exist)."""
    if not _exists(engine):
        return []
    from moirae.retract.store import RetractionStore

    return [r.to_json() for r in RetractionStore(engine.db).list(limit=limit)]


def retraction(engine, rid: int) -> dict[str, Any]:
    """One retraction with the alerts it withdrew."""
    if not _exists(engine):
        raise NoSuchRetraction(f"no retraction with id {rid!r}")
    from moirae.retract.store import RetractionStore

    store = RetractionStore(engine.db)
    return {**store.get(int(rid)).to_json(), "alerts": sorted(store.retracted_by(int(rid)))}
