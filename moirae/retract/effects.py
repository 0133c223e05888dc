"""What retracting an alert changes, and what restoring it changes back.

An alert a retraction withdraws (its support vanished, or its aggregate no longer
crosses its threshold: :mod:`moirae.retract.evaluate`) is, in order:

1. marked ``retracted`` with the reason (``moirae_alert_status``), its provenance sink
   vertices recorded as retracted (retention then treats the rows only it used as
   unsupported, ``moirae/ingest/persist.py:contributing_view``);
2. taken out of its incident: the incident counts its other events only, its severity
   is the largest z among them, and an incident left with none is resolved with the
   retraction as its note (announced on the bus like any incident change);
3. revised out of the Recall results (M 4.6): every output row it holds (its norms,
   its similar incidents) gets a DELETE revision tuple, and every other alert's
   Similarity Recall row naming it as the past event gets one too; each deleted row is
   kept so an undo publishes it again as an INSERT;
4. removed from the similarity index: its archived event row moves from the event
   stream into ``moirae_retracted_event_rows`` (kept, restored on undo) and the chunk's
   persisted and cached indexes are invalidated (``archive/simindex.py:invalidate``),
   so the next build of that chunk no longer holds it;
5. taken out of the similarity statistics (E and C_k, M 3.5) of its event-query's
   Similarity Recalls (``SimilarityRecall.forget_event``, the exact inverse of learning
   it), so the similar-incident lists computed afterwards are those of a history that
   never held it; the statistics are saved at once, without its id among those learned
   (:func:`moirae.ingest.persist.save_similarity`), so an undo after a restart learns it
   again;
6. out of the similar-incident lists already shown: every other alert whose list named
   it has its list computed again and revised to it (:mod:`moirae.retract.relist`), so
   the incident next in line takes its place.

Restoring undoes each step (the lists that named it are computed again once it is
back). Revision tuples go to the results table and the bus, numbered after the event's
newest output (``seq`` grows per operator and event).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from archive import simindex
from archive.names import quote
from archive.schema import table_exists
from moirae.queries.hybrid import event_stream
from moirae.retract.lookup import QueryGraph, sink_ids_of
from moirae.retract.store import RetractionStore
from recall.api import Output, OutputKind
from recall.revision_ops import apply_revision

log = logging.getLogger(__name__)

EVENT_ROWS_DDL = """
CREATE TABLE IF NOT EXISTS moirae_retracted_event_rows (
    stream     text NOT NULL,
    eid        text NOT NULL,
    chunk_id   bigint NOT NULL,
    row        jsonb NOT NULL,
    PRIMARY KEY (stream, eid)
);
"""


class Effects:
    """Applies and reverts the effects of retracting alerts (module doc).

    ``results`` is the recall results table (:class:`recall.outputs.StoredOutputs`, or
    None: no revisions), ``publish`` the bus's ``publish`` (or None), ``incidents`` the
    incident store (or None)."""

    def __init__(self, store: RetractionStore, archive, results=None, publish=None, incidents=None,
                 similarity=None, events=None) -> None:
        self.store = store
        self.similarity = similarity  # () -> {event-query: its Similarity Recall operators}
        self.events = events
        self.archive = archive
        self.db = archive.db
        self.results = results
        self.publish = publish
        self.incidents = incidents
        #: () -> the alerts whose recall tasks still run (set by the service): their lists are left alone
        self.open_events = None
        self.relister = None
        if similarity is not None and events is not None:
            from moirae.retract.relist import Relister

            self.relister = Relister(similarity, events, self, self._busy)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(EVENT_ROWS_DDL)

    def _busy(self) -> set[str]:
        """Alerts whose lists are not recomputed: retracted, or their tasks still running."""
        return set(self.store.retracted()) | set(self.open_events() if self.open_events is not None else ())

    # -- retract ------------------------------------------------------------------

    def retract(self, rid: int, alerts: Mapping[str, str], reason: str,
                graphs: Mapping[str, QueryGraph]) -> dict[str, Any]:
        """Withdraw ``alerts`` (eid -> event-query) for retraction ``rid``; what changed."""
        if not alerts:
            return {"alerts": 0, "incidents": [], "revisions": 0, "index_removed": 0}
        self.store.set_status(alerts, "retracted", reason, rid)
        self._sinks(alerts, graphs, True)
        incidents = self._incidents(alerts, rid, reason, retract=True)
        revisions, naming = self._revise_out(rid, alerts)
        removed = self._index(alerts, graphs, remove=True)
        stats = self._stats(alerts, forget=True)
        relisted = self._relist(naming)
        return {"alerts": len(alerts), "incidents": incidents, "revisions": revisions, "index_removed": removed,
                "stats_forgotten": stats, "relisted": relisted}

    def restore(self, rid: int, alerts: Mapping[str, str], graphs: Mapping[str, QueryGraph]) -> dict[str, Any]:
        """Bring ``alerts`` back (their retraction ``rid`` undone, their support whole again)."""
        if not alerts:
            return {"alerts": 0, "incidents": [], "revisions": 0, "index_restored": 0}
        self.store.set_status(alerts, "active", None, None)
        self._sinks(alerts, graphs, False)
        incidents = self._incidents(alerts, rid, None, retract=False)
        revisions, naming = self._revise_in(rid, alerts)
        restored = self._index(alerts, graphs, remove=False)
        stats = self._stats(alerts, forget=False)
        relisted = self._relist(naming)
        return {"alerts": len(alerts), "incidents": incidents, "revisions": revisions, "index_restored": restored,
                "stats_relearned": stats, "relisted": relisted}

    def _relist(self, eids: list[str]) -> dict[str, Any]:
        """Recompute the similar-incident lists of ``eids`` (other alerts that named a
        withdrawn or restored one): :mod:`moirae.retract.relist`."""
        if self.relister is None or not eids:
            return {"events": [], "revisions": 0}
        return self.relister.relist(eids)

    # -- 1. provenance sinks ---------------------------------------------------------

    def _sinks(self, alerts: Mapping[str, str], graphs: Mapping[str, QueryGraph], retracted: bool) -> None:
        by_event: dict[str, list[str]] = {}
        for eid, ev in alerts.items():
            by_event.setdefault(ev, []).append(eid)
        for ev, eids in by_event.items():
            qg = graphs.get(ev)
            if qg is not None:
                self.store.set_sinks(qg.graph.e, sink_ids_of(qg, eids), retracted)

    # -- 2. incidents ---------------------------------------------------------------

    def _incidents(self, alerts: Mapping[str, str], rid: int, reason: str | None, retract: bool) -> list[str]:
        """Recount each touched incident over its events not retracted; resolve one left
        empty (by this retraction), reopen one this retraction had resolved."""
        eids = list(alerts)
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            if not table_exists(cur, "moirae_incident_events"):
                return []
            cur.execute("SELECT DISTINCT incident FROM moirae_incident_events WHERE eid = ANY(%s)", (eids,))
            touched = sorted(r[0] for r in cur.fetchall())
            by = f"retraction {rid}"
            for iid in touched:
                cur.execute("SELECT count(*), max(x.z) FROM moirae_incident_events x WHERE x.incident = %s AND NOT "
                            "EXISTS (SELECT 1 FROM moirae_alert_status a WHERE a.eid = x.eid AND a.status = 'retracted')",
                            (iid,))
                n, z = cur.fetchone()
                if retract and n == 0:
                    cur.execute("UPDATE moirae_incidents SET n_events = 0, severity = NULL, status = 'resolved', "
                                "resolution = %s, resolved_by = %s, resolved_at = now(), updated_at = now() "
                                "WHERE id = %s", (f"retracted: {reason}", by, iid))
                elif not retract:
                    cur.execute("UPDATE moirae_incidents SET n_events = %s, severity = %s, "
                                "status = CASE WHEN resolved_by = %s THEN 'open' ELSE status END, "
                                "resolution = CASE WHEN resolved_by = %s THEN NULL ELSE resolution END, "
                                "resolved_at = CASE WHEN resolved_by = %s THEN NULL ELSE resolved_at END, "
                                "resolved_by = CASE WHEN resolved_by = %s THEN NULL ELSE resolved_by END, "
                                "updated_at = now() WHERE id = %s", (n, z, by, by, by, by, iid))
                else:
                    cur.execute("UPDATE moirae_incidents SET n_events = %s, severity = %s, updated_at = now() "
                                "WHERE id = %s", (n, z, iid))
        if self.incidents is not None:
            for iid in touched:
                try:
                    self.incidents.resolution_cache.invalidate()
                    detail = self.incidents.get(iid)
                    if self.publish is not None:
                        self.publish({"type": "incident", **{k: v for k, v in detail.items() if k != "events"}})
                except Exception as exc:  # the change is committed; an announcement is best effort
                    log.warning("retract: announcing incident %s failed: %s", iid, exc)
        return touched

    # -- 3. recall results ------------------------------------------------------------

    def current(self, eids: list[str]) -> dict[tuple[str, str], tuple[datetime, int, dict[str, Any]]]:
        """Per (operator, eid): the event time, the newest seq and the current rows (key -> row)."""
        if self.results is None or not eids:
            return {}
        self.results.flush()
        out: dict[tuple[str, str], tuple[datetime, int, dict[str, Any]]] = {}
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT operator, eid, event_ts, kind, seq, key, row FROM moirae_recall_outputs "
                        "WHERE eid = ANY(%s) ORDER BY operator, eid, seq, id", (eids,))
            for op, eid, ts, kind, seq, key, row in cur.fetchall():
                _, top, rows = out.get((op, eid), (ts, 0, {}))
                apply_revision(rows, Output(op, eid, ts, OutputKind(kind), seq, key, row, None))
                out[(op, eid)] = (ts, max(top, seq), rows)
        return out

    def _naming(self, eids: list[str]) -> list[str]:
        """Other events whose Similarity Recall rows name one of ``eids`` as the past event."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT DISTINCT eid FROM moirae_recall_outputs WHERE row ->> 'past_eid' = ANY(%s) "
                        "AND NOT (eid = ANY(%s))", (eids, eids))
            return [r[0] for r in cur.fetchall()]

    def emit(self, outs: list[Output]) -> None:
        for o in outs:
            self.results.append(o)
            if self.publish is not None:
                try:
                    self.publish(o)
                except Exception as exc:  # a closed bus never fails a retraction
                    log.debug("retract: publish failed: %s", exc)
        self.results.flush()

    def _revise_out(self, rid: int, alerts: Mapping[str, str]) -> tuple[int, list[str]]:
        """DELETE revisions of the alerts' own rows and of other alerts' rows naming
        them (kept for an undo); how many, and those other alerts."""
        if self.results is None:
            return 0, []
        own = list(alerts)
        others = self._naming(own)
        kept, outs = [], []
        for (op, eid), (ts, seq, rows) in sorted(self.current(own + others).items()):
            for key, row in sorted(rows.items()):
                if eid in alerts:
                    cause = eid
                elif isinstance(row, Mapping) and row.get("past_eid") in alerts:
                    cause = str(row["past_eid"])
                else:
                    continue
                seq += 1
                outs.append(Output(op, eid, ts, OutputKind.DELETE, seq, key, dict(row), None))
                kept.append((op, eid, key, ts, dict(row), cause))
        self.store.keep_revisions(rid, kept)
        self.emit(outs)
        return len(outs), sorted(others)

    def _revise_in(self, rid: int, alerts: Mapping[str, str]) -> tuple[int, list[str]]:
        """INSERT revisions giving back the rows :meth:`_revise_out` deleted: the alerts'
        own, and, unless their lists are recomputed (:meth:`_relist`), other alerts' rows
        naming them; how many, and those other alerts."""
        if self.results is None:
            return 0, []
        back = self.store.take_revisions(rid, list(alerts))
        naming = sorted({eid for _, eid, _, _, _ in back if eid not in alerts})
        if self.relister is not None:  # the lists of the operators it knows are recomputed instead
            known = self.relister.names()
            back = [b for b in back if b[1] in alerts or b[0] not in known]
        current = self.current(sorted({eid for _, eid, _, _, _ in back}))
        outs = []
        for op, eid, key, ts, row in back:
            ts0, seq, rows = current.get((op, eid), (ts, 0, {}))
            seq += 1
            current[(op, eid)] = (ts0, seq, rows)
            outs.append(Output(op, eid, ts, OutputKind.INSERT, seq, key, row, None))
        self.emit(outs)
        return len(outs), naming

    # -- 5. the similarity statistics ----------------------------------------------------

    def _stats(self, alerts: Mapping[str, str], forget: bool) -> int:
        """Take the alerts' contexts out of (or back into) their Similarity Recalls' E and
        C_k (M 3.5), so later scores are those of a history without them; the contexts
        learned are the event log's. Returns how many (operator, alert) pairs changed."""
        if self.similarity is None or self.events is None:
            return 0
        ops = self.similarity()
        n = 0
        changed_ops: dict[str, tuple[Any, list[str]]] = {}
        for eid, ev in sorted(alerts.items()):
            rec = self.events.get(eid)
            if rec is None:
                continue
            for op in ops.get(ev, ()):
                try:
                    changed = op.forget_event(eid, rec.context) if forget else op.learn_event(eid, rec.context)
                except Exception as exc:  # a context learned otherwise: the statistics stay as they were
                    log.warning("retract: %s %s in %s failed: %s", "forgetting" if forget else "relearning",
                                eid, op.name, exc)
                    continue
                n += bool(changed)
                if changed:
                    changed_ops.setdefault(op.name, (op, []))[1].append(eid)
        for op, eids in changed_ops.values():
            self._save_stats(op, eids if forget else [])
        return n

    def _save_stats(self, op, forgotten: list[str]) -> None:
        """Save ``op``'s statistics now, ``forgotten`` no longer among its learned ids, so
        a restarted process holds what this one does (an undo then learns them again)."""
        from moirae.ingest.persist import ensure_similarity_tables, save_operator

        try:  # under the operator's save lock: a maintenance save never writes an older snapshot after it
            ensure_similarity_tables(self.db)
            save_operator(self.db, op.name, op, forgotten)
        except Exception as exc:  # the maintenance round saves them again
            log.warning("retract: saving the similarity statistics of %s failed: %s", op.name, exc)

    # -- 4. the similarity index ------------------------------------------------------

    def _index(self, alerts: Mapping[str, str], graphs: Mapping[str, QueryGraph], remove: bool) -> int:
        """Move the alerts' archived event rows out of (or back into) their event streams
        and invalidate the indexes of the chunks touched; returns the rows moved."""
        by_event: dict[str, list[str]] = {}
        for eid, ev in alerts.items():
            by_event.setdefault(ev, []).append(eid)
        moved = 0
        for ev, eids in by_event.items():
            stream = event_stream(ev)
            try:
                spec = self.archive.stream(stream)
            except LookupError:  # the event-query archives no events (or is gone)
                continue
            qg = graphs.get(ev)
            eid_col = qg.eid_col if qg is not None else "eid"
            if eid_col not in spec.columns:
                continue
            chunks = self._move(spec, eid_col, eids, remove)
            moved += sum(chunks.values())
            for chunk_id in chunks:
                self.archive.present.invalidate(stream, chunk_id)
            simindex.invalidate(self.db, stream, list(chunks))
        return moved

    def _move(self, spec, eid_col: str, eids: list[str], remove: bool) -> dict[int, int]:
        """Rows moved per chunk id, in one transaction with the catalog's row counts."""
        table, ts = quote(spec.name), quote(spec.ts_col)
        grid = self.archive.grid_of(spec.name)
        per: dict[int, int] = {}
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            if remove:
                cur.execute(f"DELETE FROM {table} t WHERE {quote(eid_col)}::text = ANY(%s) "
                            f"RETURNING {quote(eid_col)}::text, {ts}, to_jsonb(t)", (eids,))
                for eid, t, row in cur.fetchall():
                    chunk = grid.chunk_of(t)
                    per[chunk] = per.get(chunk, 0) + 1
                    cur.execute("INSERT INTO moirae_retracted_event_rows (stream, eid, chunk_id, row) "
                                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                                (spec.name, eid, chunk, json.dumps(row)))
                sign = -1
            else:
                cur.execute("DELETE FROM moirae_retracted_event_rows WHERE stream = %s AND eid = ANY(%s) "
                            "RETURNING chunk_id, row", (spec.name, eids))
                rows = cur.fetchall()
                for chunk, row in rows:
                    per[chunk] = per.get(chunk, 0) + 1
                    cur.execute(f"INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, %s)",
                                (json.dumps(row),))
                sign = 1
            for chunk, n in per.items():
                cur.execute("UPDATE moirae_chunks SET rows = rows + %s WHERE stream = %s AND chunk_id = %s",
                            (sign * n, spec.name, chunk))
        return per

