"""Recall outputs (norms) that read flagged rows, re-evaluated and revised (M 3.2, 4.6; H 4).

A standard Recall's history-query reads archived rows whatever alert they fed: the norm
of any alert over ``metrics`` counts a bad reading of that stream. When the flags on a
stream change (a retraction, a correction, or the undo of one), :func:`revise_norms`
re-runs, for every event whose Recall output is stored and whose history-query reads a
chunk holding a changed row, that Recall over the archive twice, through the archive's
own history-query path (``ChunkStore.prepare`` and ``run_history_query``, chunk by
chunk, newest first, merged by the operator itself): with the flags as they were and
with the flags as they are. When the two results differ the rows did count, and the
event's stored result is revised to the second with revision tuples (INSERT, UPDATE,
DELETE; M 4.6), numbered after its newest output. An undo runs the same with the two
flag sets swapped, so it revises the norms back.

Flags are applied inside the query, by the archive's own history-query path given the
flags to apply (:func:`archive.row_flags.flagged_template`): each archived
stream the template reads becomes that stream without its removed rows, plus its
corrected rows with their new values (those of the chunk being read, bound as JSON), so
what the Recall computes equals a run over an archive that never held the bad values.
The Recall of an alert raised after a retraction reads through the same path with the
active flags (``Archiver.row_flags``, :class:`moirae.retract.flagged.ArchiveFlags`).

Events retracted themselves are left alone (their outputs were deleted:
:mod:`moirae.retract.effects`); so are events whose recall tasks are still running (the
task's next outputs would race the revision; it reads the archive as it is).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from archive.names import quote
from archive.row_flags import FixedFlags
from recall.api import EndReason, Interval, Output, OutputKind
from recall.task import plan_chunks

log = logging.getLogger(__name__)

Flags = tuple[set[int], Mapping[int, Mapping[str, Any]]]  # removed ids, corrected id -> new values


def recall_result(store, op, event: Mapping[str, Any], flags: Flags,
                  fixed_rows: Callable[[str, datetime, datetime], list[dict]] | None = None) -> dict[str, dict]:
    """The result (key -> row) standard Recall ``op`` gives ``event`` over the whole of
    its history in ``store`` with ``flags`` applied, as a completed task emits it.
    ``fixed_rows(stream, lo, hi)`` gives the corrected rows of a stream in ``[lo, hi)``
    (default none). The flags go to the archive's history-query path in place of its
    own (:mod:`archive.row_flags`)."""
    spec = op.task_for(event)
    streams = spec.query.streams
    removed, corrected = flags
    given = FixedFlags(streams, removed, corrected, fixed_rows)
    grid = store.grid_for(streams)
    state = op.start(spec)
    for chunk_id in plan_chunks(store.chunk_ids(streams), grid, spec.event_ts, spec.bound):
        rows = store.run_history_query(spec.query, spec.params, chunk_id, flags=given)
        lo, hi = grid.bounds(chunk_id)
        if spec.bound is not None and spec.bound > lo:
            lo = spec.bound
        op.on_chunk(state, chunk_id, Interval(lo, hi), rows)
    op.on_end(state, EndReason.DONE)
    return dict(state.emitted)


def corrected_rows(archive, corrected: Mapping[int, Mapping[str, Any]]) -> Callable[[str, datetime, datetime],
                                                                                      list[dict]]:
    """``fixed_rows`` for :func:`recall_result`: the archived rows of ``corrected`` with
    their new values, by stream and time (read once per stream)."""
    cache: dict[str, list[tuple[datetime, dict]]] = {}

    def rows(stream: str, lo: datetime, hi: datetime) -> list[dict]:
        if not corrected:
            return []
        if stream not in cache:
            spec = archive.stream(stream)
            with archive.db.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT _sid, {quote(spec.ts_col)}, to_jsonb(t) FROM {quote(stream)} t "
                            "WHERE _sid = ANY(%s)", (sorted(int(s) for s in corrected),))
                cache[stream] = [(ts, {**row, **corrected[int(sid)]}) for sid, ts, row in cur.fetchall()]
        return [row for ts, row in cache[stream] if lo <= ts < hi]
    return rows


def same(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether two results hold the same rows (floats equal to 1e-9, relative)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        ra, rb = a[k], b[k]
        if ra.keys() != rb.keys():
            return False
        for c in ra:
            x, y = ra[c], rb[c]
            if isinstance(x, float) and isinstance(y, float):
                if not (math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))):
                    return False
            elif x != y:
                return False
    return True


def revision_tuples(operator: str, eid: str, ts: datetime, seq: int, rows: Mapping[str, Mapping[str, Any]],
                    new: Mapping[str, Mapping[str, Any]], keep: Iterable[str] = ()) -> list[Output]:
    """Revision tuples (M 4.6) turning ``rows``, the result held for (``operator``,
    ``eid``) with newest seq ``seq``, into ``new``: DELETE what went, INSERT what came,
    UPDATE what changed (:func:`same`), numbered on from ``seq``; keys in ``keep`` are
    left alone."""
    keep = set(keep)
    out = []
    for key in sorted(k for k in rows if k not in new and k not in keep):
        seq += 1
        out.append(Output(operator, eid, ts, OutputKind.DELETE, seq, key, dict(rows[key]), None))
    for key, row in sorted(new.items()):
        old = rows.get(key)
        if key in keep or (old is not None and same({key: old}, {key: row})):
            continue
        seq += 1
        out.append(Output(operator, eid, ts, OutputKind.INSERT if old is None else OutputKind.UPDATE,
                          seq, key, dict(row), None))
    return out


class NormReviser:
    """Re-evaluates and revises stored Recall outputs over changed rows (module doc).

    ``recalls()`` gives the deployed standard Recall operators by name; ``events`` is the
    event log (``get(eid).as_event()``); ``effects`` the :class:`moirae.retract.effects.Effects`
    whose results table and bus get the revisions; ``open_events()`` the events whose
    recall tasks still run; ``retracted()`` the alerts now retracted."""

    def __init__(self, archive, recalls: Callable[[], Mapping[str, Any]], events, effects,
                 open_events: Callable[[], Iterable[str]] | None, retracted: Callable[[], set[str]]) -> None:
        self.archive = archive
        self.recalls = recalls
        self.events = events
        self.effects = effects
        self.open_events = open_events
        self.retracted = retracted

    def revise(self, stream: str, rows: Iterable[tuple[int, datetime]], before: Flags, after: Flags) -> dict[str, Any]:
        """Revise every stored Recall output the rows ``(source id, event time)`` of
        ``stream`` can reach whose value differs between the flags ``before`` and
        ``after``; ``{"events": [...], "revisions": n}``."""
        rows = list(rows)
        if not rows or self.effects.results is None:
            return {"events": [], "revisions": 0}
        skip = set(self.retracted()) | set(self.open_events() if self.open_events is not None else ())
        revised, outs = [], []
        for name, op in sorted(self.recalls().items()):
            streams = op.query.streams
            if stream not in streams:
                continue
            grid = self.archive.grid_for(streams)
            touched = {grid.chunk_of(ts) for _, ts in rows}
            for eid in self._stored(name):
                if eid in skip:
                    continue
                rec = self.events.get(eid)
                if rec is None:
                    continue
                event = rec.as_event()
                spec = op.task_for(event)
                reads = plan_chunks(sorted(touched, reverse=True), grid, spec.event_ts, spec.bound)
                if not reads:
                    continue
                try:
                    old = recall_result(self.archive, op, event, before, corrected_rows(self.archive, before[1]))
                    new = recall_result(self.archive, op, event, after, corrected_rows(self.archive, after[1]))
                except Exception as exc:  # one event's failure does not stop the others
                    log.warning("retract: re-evaluating Recall %s of %s failed: %s", name, eid, exc)
                    continue
                if same(old, new):
                    continue
                revised.append(eid)
                outs += self._diff(name, eid, new)
        if outs:
            self.effects.emit(outs)
        return {"events": sorted(set(revised)), "revisions": len(outs)}

    def _stored(self, operator: str) -> list[str]:
        """Every event with stored outputs of ``operator``."""
        self.effects.results.flush()
        with self.archive.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT DISTINCT eid FROM moirae_recall_outputs WHERE operator = %s ORDER BY eid", (operator,))
            return [r[0] for r in cur.fetchall()]

    def _diff(self, operator: str, eid: str, new: Mapping[str, Mapping[str, Any]]) -> list[Output]:
        """Revision tuples turning the stored result of (``operator``, ``eid``) into ``new``."""
        current = self.effects.current([eid]).get((operator, eid))
        if current is None:
            return []
        ts, seq, rows = current
        return revision_tuples(operator, eid, ts, seq, rows, new)
