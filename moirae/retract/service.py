"""Retractions and corrections, end to end (H 4-5 over the Ananke graphs, A 3).

:meth:`Retractions.retract` takes a selection of source rows
(:class:`moirae.retract.selection.Selection`), a reason and an author, and optionally
new values (a *correction*). In order, changing nothing until every check passed:

1. resolve the rows in the archive; refuse an unknown stream or column, a predicate
   that is not one safe condition, and a selection matching more than ``max_share``
   of the stream's archived rows unless ``confirm`` (one line each);
2. flag the rows (``moirae_retracted_rows``; the archive keeps them);
3. find the alerts they fed by forward provenance over every event-query's graph;
4. evaluate each affected alert with every active flag (:mod:`moirae.retract.evaluate`):
   one whose support vanished or whose aggregate no longer crosses its threshold is
   withdrawn (:class:`moirae.retract.effects.Effects`: status, incident, Recall
   revisions, similarity index).

:meth:`Retractions.undo` marks a retraction undone and evaluates the alerts it withdrew
again against the flags still active: each that stands again is restored.
:meth:`Retractions.reconcile` makes a retraction racing live ingestion end as if it
came after: rows arriving later that match an active range or predicate are flagged,
and alerts raised since from flagged rows are evaluated. Every step is audited
(``audit(actor, action, target, detail)``, :mod:`moirae.api.audit`'s shape).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from typing import Any

from moirae.retract.effects import Effects
from moirae.retract.errors import BadSelection, TooBroad
from moirae.retract.evaluate import Evaluator, Verdict
from moirae.retract.flagged import ArchiveFlags
from moirae.retract.lookup import QueryGraph, affected, forward
from moirae.retract.selection import Selection, archived_rows, resolve, stream_spec
from moirae.retract.store import RetractionStore

log = logging.getLogger(__name__)

#: a retraction matching more than this share of its stream's archived rows needs ``confirm``
#: (the default of the configuration key ``retract.max_share``)
MAX_SHARE = 0.05
MAX_REASON = 2000


class Retractions:
    """The retraction service of one engine (module doc).

    ``graphs()`` returns the event-queries' provenance graphs by name; ``evaluator`` the
    :class:`~moirae.retract.evaluate.Evaluator`; ``audit(actor, action, target, detail)``
    records a step."""

    def __init__(self, db, archive, graphs: Callable[[], Mapping[str, QueryGraph]], evaluator: Evaluator,
                 results=None, publish=None, incidents=None,
                 audit: Callable[[str, str, str | None, dict], None] | None = None,
                 max_share: float = MAX_SHARE, plans: Callable[[], Mapping[str, Any]] | None = None,
                 events=None, recalls: Callable[[], Mapping[str, Any]] | None = None,
                 open_events: Callable[[], Any] | None = None, similarity=None, deploy=None) -> None:
        self.db = db
        self.archive = archive
        self.graphs = graphs
        self.evaluator = evaluator
        self.store = RetractionStore(db)
        self.effects = Effects(self.store, archive, results, publish, incidents, similarity, events)
        self.effects.open_events = open_events
        self.norms = None
        if recalls is not None and events is not None:
            from moirae.retract.norms import NormReviser

            self.norms = NormReviser(archive, recalls, events, self.effects, open_events, self.store.retracted)
        self._audit = audit
        self.max_share = max_share
        if getattr(archive, "row_flags", False) is None:  # history-queries read through the flags
            archive.row_flags = ArchiveFlags(db)
        self.plans = plans
        self.events = events
        #: pattern matches a change reveals, revises or ends (:mod:`moirae.retract.patterns`)
        self.patterns = None
        if deploy is not None and events is not None:
            from moirae.retract.patterns import PatternRematcher

            self.patterns = PatternRematcher(db, archive, deploy, self.effects, self.store, events, publish)
        self._lock = threading.RLock()
        self._local = threading.local()

    # -- retract ---------------------------------------------------------------------

    def retract(self, selection: Mapping[str, Any], reason: str, author: str,
                set_values: Mapping[str, Any] | None = None, confirm: bool = False,
                audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Retract (or, with ``set_values``, correct) the rows ``selection`` names; the
        answer says what changed. Refusals raise before anything changes. ``audit``
        records each step (default: the service's)."""
        with self._auditing(audit):
            return self._retract(selection, reason, author, set_values, confirm)

    @contextmanager
    def _auditing(self, audit):
        """Within the block this thread's steps go to ``audit`` (when given)."""
        before = getattr(self._local, "audit", None)
        self._local.audit = audit
        try:
            yield
        finally:
            self._local.audit = before

    def _retract(self, selection, reason, author, set_values, confirm) -> dict[str, Any]:
        reason, author = _text(reason, "reason"), _text(author, "author")
        sel = Selection.from_json(selection)
        kind = "correction" if set_values else "retraction"
        if sel.stream is not None:
            spec = stream_spec(self.archive, sel.stream)
            _check_values(spec, set_values)
        rows = resolve(self.archive, sel)
        if not rows and not sel.follows_arrivals:
            raise BadSelection(f"the selection names no archived row ({_describe(sel)})")
        streams = {r[0] for r in rows} or {sel.stream}
        if len(streams) > 1:
            raise BadSelection(f"the ids are in several streams ({', '.join(sorted(streams))}); retract per stream")
        stream = streams.pop()
        if sel.stream is None:
            spec = stream_spec(self.archive, stream)
            _check_values(spec, set_values)
            sel = Selection(stream, sel.ids)
        total = archived_rows(self.archive, stream)
        if not confirm and total and len(rows) > self.max_share * total:
            raise TooBroad(f"the selection matches {len(rows)} of {total} archived rows of {stream!r} "
                           f"({len(rows) / total:.1%} > {self.max_share:.1%}); confirm to retract them")
        with self._lock:
            before = self.store.active_flags()
            new_values = dict(set_values) if set_values else None
            rid = self.store.create(kind, stream, {**sel.to_json(), **({"set": new_values} if new_values else {})},
                                    reason, author, [(sid, ts, new_values) for _, sid, ts, _ in rows])
            self._flags_changed()
            self._record(author, kind, rid, {"stream": stream, "selection": sel.to_json(), "rows": len(rows),
                                             "reason": reason, **({"set": new_values} if new_values else {})})
            outcome = self._evaluate(rid, [sid for _, sid, _, _ in rows], reason, author)
            raised = self._raise_hidden(rid, stream, rows, author)
            patterns = self._rematch(rid, stream, [(sid, ts) for _, sid, ts, _ in rows], before, reason)
            norms = self._revise_norms(rid, stream, [(sid, ts) for _, sid, ts, _ in rows], before, author)
        return {"id": rid, "kind": kind, "stream": stream, "rows": len(rows), **outcome,
                "raised": sorted({*raised, *patterns.get("raised", ())}), "norms": norms,
                **({"patterns": patterns} if patterns else {})}

    def _rematch(self, rid: int, stream: str, rows: list, before, reason: str, undo: bool = False) -> dict:
        """Reconcile the pattern event-queries over ``stream`` with the flags' change from
        ``before`` to now (:mod:`moirae.retract.patterns`); {} without pattern queries."""
        if self.patterns is None or not rows:
            return {}
        out = self.patterns.reconcile(rid, stream, rows, before, self.store.active_flags(), reason, self.graphs(),
                                      self._record, undo)
        return out if any(out.values()) else {}

    def _revise_norms(self, rid: int, stream: str, rows: list, before, author: str) -> dict[str, Any]:
        """Revise the Recall outputs of any alert that read ``rows`` (:mod:`moirae.retract.norms`)
        from the flags ``before`` to the flags active now; audited."""
        if self.norms is None or not rows:
            return {"events": [], "revisions": 0}
        out = self.norms.revise(stream, rows, before, self.store.active_flags())
        if out["events"]:
            self._record(author, "norms revised", rid, out)
        return out

    def _raise_hidden(self, rid: int, stream: str, rows: list, author: str) -> list[str]:
        """Record as alerts the windows the correction made cross their threshold
        (:func:`moirae.retract.hidden.hidden_windows`); their eids."""
        if self.plans is None or self.events is None:
            return []
        from ananke.poly_maint import window_of_sink
        from moirae.ingest.events import EventRecord
        from moirae.retract.hidden import archive_aggregator, archive_reader, hidden_rows, hidden_windows
        from moirae.retract.lookup import sources_of_events

        removed, corrected = self.store.active_flags()
        retracted = self.store.retracted()
        plans = self.plans()
        raised: list[str] = []
        changed = [(sid, ts, vals) for _, sid, ts, vals in rows]
        for name, qg in self.graphs().items():
            plan = plans.get(name)
            if plan is None or stream not in plan.streams or plan.degree != 1:
                continue
            if plan.kind == "row":
                standing = {e: q for e, q in affected([qg], [sid for sid, _, _ in changed]).items() if e not in retracted}
                fed = set().union(*sources_of_events(qg, list(standing)).values()) if standing else set()
                records = [EventRecord(name, f"{name}:r{sid}:c{rid}", row[plan.ts or "ts"], row)
                           for sid, row in hidden_rows(plan, changed, removed, corrected, fed)]
                raised += self._record_raised(rid, name, records, author)
                continue
            if plan.kind != "window":
                continue
            alerted = set()
            for _sid, (eid, payload) in _all_sinks(qg).items():
                if eid not in retracted and qg.ts_col in payload:
                    keys = tuple(payload.get(k) for k in plan.keys)
                    alerted.add(window_of_sink(plan, keys, _as_time(payload[qg.ts_col])))
            read = archive_reader(self.archive, plan.streams[0], plan.ts)
            found = hidden_windows(plan, read, changed, removed, corrected, alerted,
                                   archive_aggregator(self.archive, plan.streams[0], plan.ts))
            records = []
            for (keys, _lo, hi), values in found:
                eid = f"{name}:{':'.join(str(k) for k in keys)}:{hi.strftime('%Y%m%d%H%M%S')}:c{rid}"
                attrs = {**dict(zip(plan.keys, keys, strict=True)), **values}
                records.append(EventRecord(name, eid, hi, attrs))
            raised += self._record_raised(rid, name, records, author)
        return sorted(raised)

    def _record_raised(self, rid: int, event: str, records: list, author: str) -> list[str]:
        """Log the hidden alerts found (the incident store joins them as it joins any)."""
        out = []
        for r in self.events.add(records):
            out.append(r.eid)
            self.store.set_status({r.eid: event}, "active", f"raised by retraction {rid}", rid)
            self._record(author, "alert raised", r.eid, {"event": event, "retraction": rid})
        return out

    def _evaluate(self, rid: int, source_ids: list[int], reason: str, author: str,
                  only_new: bool = False) -> dict[str, Any]:
        """Evaluate the alerts ``source_ids`` fed against every active flag; withdraw
        those that no longer stand (for retraction ``rid``)."""
        graphs = self.graphs()
        hit = affected(graphs.values(), source_ids)
        statuses = self.store.status_of(hit)
        if only_new:
            hit = {e: q for e, q in hit.items() if e not in statuses}
        else:
            hit = {e: q for e, q in hit.items() if statuses.get(e, {}).get("status") != "retracted"}
        verdicts = self._verdicts(hit)
        gone = {e: hit[e] for e, v in verdicts.items() if not v.holds}
        kept = {e: hit[e] for e, v in verdicts.items() if v.holds}
        self.store.set_status({e: q for e, q in kept.items() if e not in statuses}, "active", None, None)
        changed = {}
        if gone:
            why = {e: verdicts[e].why for e in gone}
            changed = self.effects.retract(rid, gone, reason, graphs)
            for eid, q in sorted(gone.items()):
                self._record(author, "alert retracted", eid, {"event": q, "retraction": rid, "why": why[eid]})
            self._record_relisted(author, rid, changed)
        return {"affected": len(hit), "retracted": sorted(gone), "kept": sorted(kept),
                "inexact": sorted(e for e, v in verdicts.items() if not v.exact),
                "verdicts": {e: {"holds": v.holds, "why": v.why, "value": v.value} for e, v in verdicts.items()},
                "changes": changed}

    def _verdicts(self, alerts: Mapping[str, str]) -> dict[str, Verdict]:
        """Each alert's verdict under every active flag on its sources."""
        removed, corrected = self.store.active_flags()
        by_event: dict[str, list[str]] = {}
        for eid, q in alerts.items():
            by_event.setdefault(q, []).append(eid)
        out: dict[str, Verdict] = {}
        for q, eids in by_event.items():
            out.update(self.evaluator.evaluate(q, sorted(eids), removed, corrected))
        return out

    # -- undo ------------------------------------------------------------------------

    def undo(self, rid: int, author: str,
             audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Undo retraction ``rid``: its flags stop counting; each alert it withdrew that
        stands again under the remaining flags is restored."""
        with self._auditing(audit):
            return self._undo(rid, author)

    def _undo(self, rid: int, author: str) -> dict[str, Any]:
        author = _text(author, "author")
        with self._lock:
            r = self.store.get(rid)
            before = self.store.active_flags()
            if not self.store.mark_undone(rid, author):
                return {"id": rid, "undone": False, "message": f"retraction {rid} was undone already",
                        "restored": [], "still_retracted": []}
            self._flags_changed()
            self._record(author, "retraction undone", rid, {"stream": r.stream})
            withdrawn = self.store.retracted_by(rid)
            verdicts = self._verdicts(withdrawn)
            back = {e: q for e, q in withdrawn.items() if verdicts[e].holds}
            still = {e: q for e, q in withdrawn.items() if not verdicts[e].holds}
            changes = self.effects.restore(rid, back, self.graphs())
            # alerts another active retraction also withdraws stay retracted, under that one
            for eid, q in sorted(still.items()):
                other = self._active_cause(eid)
                self.store.set_status({eid: q}, "retracted", verdicts[eid].why, other)
                if other is not None:
                    self.store.move_revisions(rid, other, eid)
            for eid, q in sorted(back.items()):
                self._record(author, "alert restored", eid, {"event": q, "retraction": rid})
            self._record_relisted(author, rid, changes)
            raised = self.store.raised_by(rid)  # what the bad correction itself raised goes again
            if raised:
                self.effects.retract(rid, raised, f"retraction {rid} undone", self.graphs())
            patterns = self._rematch(rid, r.stream, [(sid, ts) for _, sid, ts, _ in self.store.rows_of(rid)], before,
                                     f"retraction {rid} undone", undo=True)
            rows = [sid for _, sid, _, _ in self.store.rows_of(rid)]
            # a correction undone may withdraw alerts it had raised or kept standing
            again = self._evaluate(rid, rows, f"retraction {rid} undone", author) if r.kind == "correction" else {}
            norms = self._revise_norms(rid, r.stream, [(sid, ts) for _, sid, ts, _ in self.store.rows_of(rid)],
                                       before, author)
        return {"id": rid, "undone": True, "restored": sorted(back), "still_retracted": sorted(still),
                "changes": changes, "withdrawn": sorted(raised), "norms": norms,
                **({"patterns": patterns} if patterns else {}),
                **({"re_evaluated": again} if again else {})}

    def _active_cause(self, eid: str) -> int | None:
        """An active retraction flagging a source row of ``eid`` (the newest), or None."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT event FROM moirae_alert_status WHERE eid = %s", (eid,))
            row = cur.fetchone()
        qg = self.graphs().get(row[0]) if row else None
        if qg is None:
            return None
        from moirae.retract.lookup import sources_of_events

        srcs = sorted(sources_of_events(qg, [eid]).get(eid, ()))
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT max(r.id) FROM moirae_retracted_rows x JOIN moirae_retractions r ON r.id = x.retraction "
                        "WHERE r.undone_at IS NULL AND x.source_id = ANY(%s)", (srcs,))
            return cur.fetchone()[0]

    # -- racing live ingestion ----------------------------------------------------------

    def reconcile(self) -> dict[str, Any]:
        """Flag rows that arrived after an active range or predicate retraction and match
        it, and evaluate the alerts raised since from flagged rows (module doc)."""
        with self._lock:
            flagged, evaluated = 0, []
            for r in self.store.list(active_only=True, limit=1000):
                sel = Selection.from_json({k: v for k, v in r.selection.items() if k != "set"})
                if not sel.follows_arrivals:
                    continue
                rows = resolve(self.archive, sel)
                nv = r.selection.get("set")
                before = self.store.active_flags() if self.norms is not None or self.patterns is not None else None
                new = self.store.flag(r.id, r.stream, [(sid, ts, nv) for _, sid, ts, _ in rows])
                if new:
                    self._flags_changed()
                    flagged += len(new)
                    self._record("engine", "late rows flagged", r.id, {"rows": len(new)})
                    # every alert the late rows fed is evaluated again, not only new ones
                    evaluated += self._evaluate(r.id, new, r.reason, "engine")["retracted"]
                    late = set(new)
                    self._rematch(r.id, r.stream, [(sid, ts) for _, sid, ts, _ in rows if sid in late], before, r.reason)
                    self._revise_norms(r.id, r.stream, [(sid, ts) for _, sid, ts, _ in rows if sid in late],
                                       before, "engine")
            removed, corrected = self.store.active_flags()
            ids = sorted(removed | set(corrected))
            if ids:
                # per retraction, so each withdrawn alert names the retraction that did it
                per: dict[int, list[int]] = {}
                with self.db.connection() as conn, conn.cursor() as cur:
                    cur.execute("SELECT x.retraction, x.source_id FROM moirae_retracted_rows x JOIN moirae_retractions r "
                                "ON r.id = x.retraction WHERE r.undone_at IS NULL")
                    for rid, sid in cur.fetchall():
                        per.setdefault(rid, []).append(sid)
                for rid, sids in sorted(per.items()):
                    r = self.store.get(rid)
                    out = self._evaluate(rid, sids, r.reason, "engine", only_new=True)
                    evaluated += out["retracted"]
        return {"flagged": flagged, "retracted": evaluated}

    # -- reading ---------------------------------------------------------------------

    def get(self, rid: int) -> dict[str, Any]:
        r = self.store.get(rid)
        return {**r.to_json(), "alerts": sorted(self.store.retracted_by(rid))}

    def list(self, limit: int = 100) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.store.list(limit=limit)]

    def lookup(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        """Forward lookup (:func:`moirae.retract.lookup.forward`) of the rows ``selection`` names."""
        sel = Selection.from_json(selection, allow_stream=True)
        rows = resolve(self.archive, sel)
        return {"selection": sel.to_json(), **forward(list(self.graphs().values()), self.db,
                                                       [(s, i, t) for s, i, t, _ in rows], self.archive.horizon)}

    def _record_relisted(self, author: str, rid: int, changes: Mapping[str, Any]) -> None:
        """Audit the similar-incident lists the change revised (:mod:`moirae.retract.relist`)."""
        relisted = changes.get("relisted") or {}
        if relisted.get("events"):
            self._record(author, "similar lists revised", rid, dict(relisted))

    def _flags_changed(self) -> None:
        """The active flags changed: the archive's history-queries read them again
        (:class:`moirae.retract.flagged.ArchiveFlags`)."""
        flags = getattr(self.archive, "row_flags", None)
        if flags is not None and hasattr(flags, "invalidate"):
            flags.invalidate()

    def _record(self, actor: str, action: str, target: Any, detail: dict) -> None:
        audit = getattr(self._local, "audit", None) or self._audit
        if audit is not None:
            audit(actor, action, None if target is None else str(target), detail)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadSelection(f"a retraction needs a non-empty {what}")
    if "\x00" in value or len(value) > MAX_REASON:
        raise BadSelection(f"{what} must be at most {MAX_REASON} characters, without NUL")
    return value.strip()


def _check_values(spec, values: Mapping[str, Any] | None) -> None:
    """New values of a correction: the stream's payload columns only, never its event time."""
    if not values:
        return
    if not isinstance(values, Mapping):
        raise BadSelection(f"set must map column to new value, got {values!r}")
    for col in values:
        if col == spec.ts_col:
            raise BadSelection(f"a correction cannot change the event time column {col!r}; retract the row instead")
        if col not in spec.columns:
            raise BadSelection(f"stream {spec.name!r} has no column {col!r} (columns: {', '.join(spec.columns)})")


def _describe(sel: Selection) -> str:
    return ", ".join(f"{k}={v}" for k, v in sel.to_json().items())


def _all_sinks(qg: QueryGraph) -> dict[int, tuple[str, dict]]:
    """Every sink vertex of ``qg``'s graph: sink id -> (eid, payload)."""
    g = qg.graph
    conn = g.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, payload FROM {g.v} WHERE kind = 'sink'")
            return {int(i): (str(p.get(qg.eid_col)), dict(p)) for i, p in cur.fetchall()}
    finally:
        conn.close()


def _as_time(v):
    from datetime import datetime

    return v if isinstance(v, datetime) else datetime.fromisoformat(str(v).replace("Z", "+00:00"))
