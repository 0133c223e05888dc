"""Similar-incident lists already shown, recomputed after a retraction or its undo (M 3.5, 4.6).

Withdrawing an alert takes its event row out of the similarity index and its context
out of the statistics (:mod:`moirae.retract.effects`); the lists other alerts were shown
still name it, and the incident that would have taken its place, and the scores the
changed statistics give, are missing. :class:`Relister` computes the list of each such
alert again, with the operator's own task path (``task_for``, ``start``, chunk by chunk
newest first through ``fetch_chunk``, the same index a Recall Manager task reads), and
revises the stored result to it with revision tuples (INSERT, UPDATE, DELETE) numbered
after the alert's newest output. The status row is left as it is; the search goes back
as far as the stored one says the first went (``searched_back_to``), never further.

An undo runs the same once the event is back in the index and the statistics, so the
lists return to what they were. Everything comes from the database and the operators'
indexes (the state a restarted process has too), nothing from the process that made
the retraction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from moirae.retract.norms import revision_tuples
from recall.api import Interval
from recall.similarity_recall import STATUS_KEY
from recall.task import plan_chunks

log = logging.getLogger(__name__)


def similar_rows(op, event: Mapping[str, Any], since: datetime | None = None) -> dict[str, dict]:
    """The similar incidents (key -> row) Similarity Recall ``op`` holds for ``event``
    after reading its history back to ``since`` (all of it when None), as JSON keeps them."""
    spec = op.task_for(event)
    state = op.start(spec)
    store, streams = op.store, spec.query.streams
    grid = store.grid_for(streams)
    for chunk_id in plan_chunks(store.chunk_ids(streams), grid, spec.event_ts, spec.bound):
        lo, hi = grid.bounds(chunk_id)
        if since is not None and hi <= since:
            break  # newest first: the first search stopped here
        op.on_chunk(state, chunk_id, Interval(max(lo, spec.bound) if spec.bound else lo, hi),
                    op.fetch_chunk(state, chunk_id))
    return {str(k): json.loads(json.dumps(v, default=str)) for k, v in state.rows.items()}


class Relister:
    """Recomputes and revises the similar-incident lists of alerts (module doc).

    ``operators()`` gives the deployed Similarity Recall operators by event-query
    (``{event-query: [operator, ...]}``); ``events`` is the event log; ``effects`` the
    :class:`moirae.retract.effects.Effects` whose results table and bus get the
    revisions; ``skip()`` the alerts not to touch (retracted, or whose tasks still run)."""

    def __init__(self, operators: Callable[[], Mapping[str, Iterable[Any]]], events, effects,
                 skip: Callable[[], Iterable[str]]) -> None:
        self.operators = operators
        self.events = events
        self.effects = effects
        self.skip = skip

    def names(self) -> set[str]:
        """The Similarity Recall operators deployed now."""
        return {op.name for group in self.operators().values() for op in group}

    def relist(self, eids: Iterable[str]) -> dict[str, Any]:
        """Revise the stored similar-incident lists of ``eids``; ``{"events": [...], "revisions": n}``."""
        eids = sorted(set(eids))
        if not eids or self.effects.results is None:
            return {"events": [], "revisions": 0}
        ops = {op.name: op for group in self.operators().values() for op in group}
        skip = set(self.skip())
        outs, revised = [], []
        for (name, eid), (ts, seq, rows) in sorted(self.effects.current(eids).items()):
            op = ops.get(name)
            rec = None if op is None or eid in skip else self.events.get(eid)
            if rec is None:
                continue
            status = rows.get(STATUS_KEY) or {}
            since = status.get("searched_back_to")
            try:
                new = similar_rows(op, rec.as_event(), datetime.fromisoformat(since) if since else None)
            except Exception as exc:  # one alert's failure does not stop the others
                log.warning("retract: recomputing the similar incidents of %s by %s failed: %s", eid, name, exc)
                continue
            mine = revision_tuples(name, eid, ts, seq, rows, new, keep=[STATUS_KEY])
            if mine:
                revised.append(eid)
                outs += mine
        if outs:
            self.effects.emit(outs)
        return {"events": sorted(set(revised)), "revisions": len(outs)}
