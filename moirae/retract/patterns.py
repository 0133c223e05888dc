"""Pattern matches a retraction or correction reveals, changes or ends (T 3-4 x H 4-5).

A pattern event-query's match is the product of its bound rows (HUKA: retracting one
of them zeroes it, :mod:`moirae.retract.evaluate`). The polynomial cannot say more: a
bad row may have *prevented* a match (it broke strict contiguity, or its value failed a
DEFINE), a correction may change a match's MEASURES, or a new match may take rows
AFTER MATCH SKIP then denies to a later one. So for each pattern event-query over the
changed stream, :class:`PatternRematcher` runs the compiled matcher
(:class:`moirae.patterns.Matcher`) twice over each affected key's archived rows around
the changed rows, once as the flags stood before the change and once as they stand
after it, and reconciles the difference with the events already emitted:

- a match only the second run finds, not yet an event, becomes one through the live
  event path: its row archived in the event stream, its provenance (the bound rows) in
  the query's Ananke graph with its polynomial (their product), then contexts, the
  event log, the similarity statistics and the recall tasks
  (:meth:`moirae.deploy.processing.EventProcessor.process`); its id is the one the live
  operator forms (pattern, key, first and last row ids), so a later run dedupes it;
- a match both runs find whose MEASURES differ is revised: the event log and the
  archived event row take the new values, the change is kept
  (``moirae_pattern_revisions``) and announced (``{"type": "event revised"}``);
- a match only the first run finds that is still an active event is withdrawn
  (:meth:`moirae.retract.effects.Effects.retract`).

An undo runs the same reconciliation from the flags with the retraction to those
without it, so it reverses each step. The rows read span the changed rows' times
widened by ``2 x WITHIN`` on each side (every row a match through a changed row can
bind, and the rows that decide where the matches before it end), and further while
the two runs still differ within WITHIN of the end (AFTER MATCH SKIP carries a change
along a key). A match whose last row lies at or after the live query's frontier (what
its sink has not emitted yet) is left to the live query, as materialization does.
Each key's runs start after the last gap of at least WITHIN between its rows within
``8 x WITHIN`` before that span (no match straddles it, so the matcher's state there is
the live operator's); a key without such a gap starts at the first row read, the same
row in both runs. A MATCH_NUMBER() measure, counted from the runs' start, is not
compared (NULL in a raised match).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive import simindex
from archive.names import quote
from archive.schema import table_exists
from moirae.queries.hybrid import event_stream

log = logging.getLogger(__name__)

REVISIONS_DDL = """
CREATE TABLE IF NOT EXISTS moirae_pattern_revisions (
    id         bigserial PRIMARY KEY,
    retraction bigint NOT NULL,
    eid        text NOT NULL,
    event      text NOT NULL,
    before     jsonb NOT NULL,
    after      jsonb NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
"""
#: how far a change is followed along a key (in spans of 4 x WITHIN) while the runs differ at its end
MAX_WIDEN = 16
#: how far before the span (in WITHINs) a key's rows are searched for a gap no match straddles
LOOK_BACK = 8
#: rows kept before that gap (what PREV(col, n) of the first row after it reads)
PREV_ROWS = 4
_RID = "moirae_pat_rid"


@dataclass(frozen=True)
class PatternQuery:
    """A deployed pattern event-query as the rematcher reads it: its compiled patterns,
    the column naming each match's pattern (several patterns in one operator), its
    event id and time columns and its one source stream."""

    name: str
    patterns: tuple
    tag: str | None
    eid: str
    ts: str
    source: str

    @property
    def within(self) -> timedelta:
        return timedelta(microseconds=max(cp.within_ns for cp in self.patterns) // 1000)


def pattern_queries(deploy) -> dict[str, PatternQuery]:
    """The deployed pattern event-queries (``Engine.pattern_query``, ``pattern_queries``,
    a monitor file's MATCH_RECOGNIZE): those whose function carries its compiled pattern(s)."""
    out = {}
    for name, q in list(deploy.event_queries.items()):
        fn = q.fn
        single = getattr(fn, "pattern", None)
        cps = (single,) if single is not None else tuple(getattr(fn, "patterns", ()) or ())
        if not cps or len(q.inputs) != 1 or any(cp.within_ns is None for cp in cps):
            continue
        tag = None
        if single is None:
            try:
                spec = deploy.archiver.stream(event_stream(name))
            except LookupError:
                continue
            known = {q.eid, q.ts, *(c for cp in cps for c in cp.partition_by),
                     *(a for cp in cps for a, _ in cp.statement.measures)}
            tag = next((c for c in spec.columns if c not in known), None)
            if tag is None:
                continue
        out[name] = PatternQuery(name, cps, tag, q.eid, q.ts, q.inputs[0])
    return out


class PatternRematcher:
    """Reconciles pattern events with a change of the flags (module doc).

    ``deploy``: the Deploy Manager (its event-queries, flows and event processor);
    ``effects``: the retraction's :class:`~moirae.retract.effects.Effects` (withdrawing);
    ``store``: the :class:`~moirae.retract.store.RetractionStore`; ``events``: the event
    log; ``publish``: the bus (or None)."""

    def __init__(self, db, archive, deploy, effects, store, events, publish=None) -> None:
        self.db = db
        self.archive = archive
        self.deploy = deploy
        self.effects = effects
        self.store = store
        self.events = events
        self.publish = publish
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(REVISIONS_DDL)

    def reconcile(self, rid: int, stream: str, rows: Sequence[tuple[int, datetime]], before: tuple, after: tuple,
                  reason: str, graphs: Mapping[str, Any], record: Callable[[str, str, Any, dict], None],
                  undo: bool = False) -> dict[str, list[str]]:
        """Reconcile every pattern event-query over ``stream`` with the change of the
        flags from ``before`` to ``after`` (each ``(removed ids, corrected id -> values)``)
        at source rows ``rows`` (id, time); ``record(actor, action, target, detail)``
        audits each step. Returns the eids raised, revised and withdrawn."""
        out: dict[str, list[str]] = {"raised": [], "revised": [], "withdrawn": []}
        if not rows:
            return out
        for pq in pattern_queries(self.deploy).values():
            if pq.source != stream:
                continue
            try:
                got = self._query(rid, pq, rows, before, after, reason, graphs, record, undo)
            except Exception as exc:  # one query's failure leaves the others' reconciliation standing
                log.warning("retract: re-matching pattern query %s after retraction %s failed: %s", pq.name, rid, exc)
                continue
            for k, v in got.items():
                out[k] += v
        return out

    # -- one pattern event-query --------------------------------------------------------

    def _query(self, rid, pq: PatternQuery, rows, before, after, reason, graphs, record, undo) -> dict[str, list[str]]:
        spec = self.archive.stream(pq.source)
        flow = self.deploy.flows.get(pq.name)
        live = flow is not None and flow.streaming is not None
        frontier = flow.emitted_below() if live else None
        if live and frontier is None:  # its sink has emitted nothing yet: every match is still the live query's
            return {"raised": [], "revised": [], "withdrawn": []}
        w = pq.within
        old, new = {}, {}
        for lo, hi in _spans(sorted(t for _, t in rows), 4 * w):
            o, n = self._runs(pq, spec, {int(s) for s, _ in rows}, lo - 2 * w, hi + 2 * w, before, after, frontier)
            old.update(o)
            new.update(n)
        known = self.events.known(list({*old, *new}))
        status = self.store.status_of(list(known))
        retracted = {e for e, s in status.items() if s.get("status") == "retracted"}
        raised = [e for e in sorted(new) if e not in old and e not in known]
        vanished = [e for e in sorted(old) if e not in new and e in known and e not in retracted]
        changed = [e for e in sorted(set(old) & set(new)) if e in known and e not in retracted
                   and _plain(old[e][1]) != _plain(new[e][1])]
        by = f"the undo of retraction {rid}" if undo else f"retraction {rid}"
        if raised:
            self._raise(rid, pq, {e: new[e] for e in raised}, spec, flow, by, record)
        for eid in changed:
            self._revise(rid, pq, eid, new[eid][1], by, record)
        if vanished:
            why = f"pattern {pq.name!r} no longer matches these rows after {by}"
            self.effects.retract(rid, {e: pq.name for e in vanished}, reason if not undo else why, graphs)
            for eid in vanished:
                record("engine", "alert retracted", eid, {"event": pq.name, "retraction": rid, "why": why})
        return {"raised": raised, "revised": changed, "withdrawn": vanished}

    def _runs(self, pq: PatternQuery, spec, changed: set[int], lo: datetime, hi: datetime, before, after,
              frontier) -> tuple[dict, dict]:
        """The matches (eid -> (match, measures, pattern)) of the affected keys over
        ``[lo, hi]`` under the flags ``before`` and ``after``, differing only in the
        span's matches (widened while they differ near its end). A changed row's keys are
        its key as archived and under either flags: a correction of a partition column
        moves the row to another key, whose runs change too."""
        w = pq.within
        for _ in range(MAX_WIDEN):
            frame = self.archive.read(pq.source, lo - LOOK_BACK * w, hi + w, with_ids=True)
            if not len(frame):
                return {}, {}
            frame = frame.assign(**{_RID: frame["_sid"].astype("int64")})
            mine = frame[frame[_RID].isin(list(changed))]
            # a correction of a partition column moves its row to another key: both keys' runs change
            keys = _keys(mine, pq) | _keys(_flagged(mine, *before), pq) | _keys(_flagged(mine, *after), pq)
            if not keys:
                return {}, {}
            frame = _anchored(frame[_in_keys(frame, pq, keys)], pq, spec.ts_col, lo)
            newest = pd.Timestamp(frame[spec.ts_col].max())
            old = self._matches(pq, _flagged(frame, *before), hi, frontier)
            new = self._matches(pq, _flagged(frame, *after), hi, frontier)
            differ = {e for e in set(old) ^ set(new)} | {e for e in set(old) & set(new)
                                                          if _plain(old[e][1]) != _plain(new[e][1])}
            late = [e for e in differ if pd.Timestamp((old.get(e) or new[e])[0].first_ts) >= pd.Timestamp(hi) - w]
            if not late or newest < pd.Timestamp(hi):
                return old, new
            hi = hi + 4 * w
        return old, new

    def _matches(self, pq: PatternQuery, frame: pd.DataFrame, hi: datetime, frontier) -> dict:
        """Every pattern's matches over ``frame`` that begin before ``hi`` (all their rows
        were read) and end below the live ``frontier``: eid -> (match, measures, pattern)."""
        from moirae.patterns import Matcher
        from moirae.patterns.spark_core import event_id

        out = {}
        for cp in pq.patterns:
            numbered = _numbered(cp)
            rows = frame.rename(columns={_RID: cp.row_id}) if cp.row_id != _RID else frame
            cols = [c for c in dict.fromkeys([*cp.partition_by, cp.order_by, cp.row_id, *cp.columns_used])
                    if c in rows.columns]
            rows = rows[cols].assign(**{cp.order_by: pd.to_datetime(rows[cp.order_by], utc=True)
                                        .astype("datetime64[ns, UTC]")})
            m = Matcher(cp)
            found, states = m.advance_frame({}, rows)
            for st in states.values():
                found += m.finish(st)[0]
            for match in found:
                first, last = pd.Timestamp(match.first_ts), pd.Timestamp(match.last_ts)
                if first >= pd.Timestamp(hi) or (frontier is not None and last >= pd.Timestamp(frontier)):
                    continue
                measures = {a: match.measures.get(a) for a, _ in cp.statement.measures if a not in numbered
                            and a not in (pq.eid, pq.ts, *cp.partition_by, *([pq.tag] if pq.tag else []))}
                out[event_id(cp.name, match)] = (match, measures, cp)
        return out

    # -- the three reconciliations --------------------------------------------------------

    def _raise(self, rid: int, pq: PatternQuery, found: dict, spec, flow, by: str, record) -> None:
        """New matches as events, through the live event path (module doc)."""
        ev = self.archive.stream(event_stream(pq.name))
        rows = []
        for eid, (m, measures, cp) in found.items():
            row = {pq.eid: eid, pq.ts: pd.Timestamp(m.last_ts).tz_convert("UTC"),
                   **dict(zip(cp.partition_by, m.key, strict=True)), **measures}
            if pq.tag:
                row[pq.tag] = cp.name
            rows.append(row)
        frame = pd.DataFrame(rows)
        for c in ev.columns:
            if c not in frame.columns:
                frame[c] = None
        frame = frame[[ev.ts_col, *ev.columns]]
        frame[ev.ts_col] = pd.to_datetime(frame[ev.ts_col], utc=True)
        batch = _batch_id(rid, sorted(found))
        self.archive.append(ev.name, batch, frame, key=pq.eid)
        if flow is not None:
            self._provenance(pq, flow, frame, found, ev)
        self.store.set_status({e: pq.name for e in found}, "active", f"raised by {by}", rid)
        if flow is not None:
            self.deploy.processor.process(flow, frame, batch, False)
        for eid in found:
            record("engine", "alert raised", eid, {"event": pq.name, "retraction": rid, "by": "pattern re-match"})

    def _provenance(self, pq: PatternQuery, flow, frame: pd.DataFrame, found: dict, ev) -> None:
        """The new matches' sink vertices, their bound rows as source vertices and edges
        (ANK-1's items, A 3) and their polynomials (the product of the bound rows, H 4)."""
        from ananke.items import Edge, Label, SinkVertex, SourceVertex
        from archive.ids import source_ids

        if flow.graph is None:
            return
        sink_ids = source_ids(f"sink:{pq.name}", frame, ev.id_columns)
        src = self.archive.read(pq.source, pd.Timestamp(frame[pq.ts].min()) - pq.within,
                                pd.Timestamp(frame[pq.ts].max()), with_ids=True)
        times = {int(s): pd.Timestamp(t).to_pydatetime() for s, t in zip(src["_sid"], src[self.archive.stream(
            pq.source).ts_col], strict=True)}
        wm = flow.logic.watermark() if flow.logic is not None else None
        items, polys = [], []
        for sid, (_, row) in zip(sink_ids, frame.iterrows(), strict=True):
            m = found[row[pq.eid]][0]
            ts = pd.Timestamp(row[pq.ts]).to_pydatetime()
            stamp = wm or ts
            payload = {k: _json(v) for k, v in row.items() if k != pq.ts}
            items.append(SinkVertex(int(sid), pq.name, ts, stamp, payload))
            bound = [int(r) for r, _ in m.rows]
            for b in bound:
                items += [SourceVertex(b, times.get(b, ts), stamp), Edge(b, int(sid), stamp)]
            items.append(Label(int(sid), "sink", stamp))
            polys.append((int(sid), ts, bound))
        with flow.logic.lock if flow.logic is not None else _Null():
            flow.graph(items)
        if flow.polys is not None:
            from ananke.polynomial import Poly

            flow.polys.put(pq.name, [(s, t, Poly(np.array(b, dtype=np.int64), None, 0)) for s, t, b in polys])

    def _revise(self, rid: int, pq: PatternQuery, eid: str, measures: dict, by: str, record) -> None:
        """A match whose MEASURES changed: the event log, the archived event row and the
        revision record take the new values; announced and audited."""
        rec = self.events.get(eid)
        if rec is None:
            return
        before = {k: rec.attrs.get(k) for k in measures}
        after = {k: _json(v) for k, v in measures.items()}
        attrs = {**rec.attrs, **after}
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("UPDATE moirae_events SET attrs = %s WHERE eid = %s", (json.dumps(attrs, default=str), eid))
            cur.execute("INSERT INTO moirae_pattern_revisions (retraction, eid, event, before, after) "
                        "VALUES (%s, %s, %s, %s, %s)", (rid, eid, pq.name, json.dumps(before, default=str),
                                                         json.dumps(after, default=str)))
        rec.attrs = attrs  # the log's kept copy, when it is the one get() returned
        self._update_row(pq, eid, after)
        msg = {"type": "event revised", "eid": eid, "event": pq.name, "before": before, "after": after, "by": by}
        if self.publish is not None:
            try:
                self.publish(msg)
            except Exception as exc:  # a closed bus never fails a retraction
                log.debug("retract: publish failed: %s", exc)
        record("engine", "measures revised", eid, {"event": pq.name, "retraction": rid, "before": before,
                                                   "after": after})

    def _update_row(self, pq: PatternQuery, eid: str, values: Mapping[str, Any]) -> None:
        """The archived event row of ``eid`` with ``values``; its chunk's indexes invalidated."""
        try:
            spec = self.archive.stream(event_stream(pq.name))
        except LookupError:
            return
        cols = [c for c in values if c in spec.columns]
        if not cols:
            return
        sets = ", ".join(f"{quote(c)} = %s" for c in cols)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE {quote(spec.name)} SET {sets} WHERE {quote(pq.eid)}::text = %s "
                        f"RETURNING {quote(spec.ts_col)}", (*[values[c] for c in cols], eid))
            times = [r[0] for r in cur.fetchall()]
        grid = self.archive.grid_of(spec.name)
        chunks = sorted({grid.chunk_of(t) for t in times})
        for chunk_id in chunks:
            self.archive.present.invalidate(spec.name, chunk_id)
        if chunks:
            simindex.invalidate(self.db, spec.name, chunks)

    def revisions(self, eid: str) -> list[dict[str, Any]]:
        """The measure revisions of ``eid``, oldest first."""
        return measure_revisions(self.db, eid)


def measure_revisions(db, eid: str) -> list[dict[str, Any]]:
    """The MEASURES revisions of match ``eid`` (``{"retraction", "before", "after", "at"}``),
    oldest first; none when the database has no revision table (it creates none)."""
    with db.connection() as conn, conn.cursor() as cur:
        if not table_exists(cur, "moirae_pattern_revisions"):
            return []
        cur.execute("SELECT retraction, before, after, at FROM moirae_pattern_revisions WHERE eid = %s ORDER BY id",
                    (eid,))
        return [{"retraction": r, "before": b, "after": a, "at": at.isoformat()} for r, b, a, at in cur.fetchall()]


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _numbered(cp) -> set[str]:
    """The measures reading MATCH_NUMBER(): a run started inside a key's stream counts
    from its own start, so they are neither compared nor given (NULL in a raised match)."""
    from moirae.patterns.expr import Special, walk

    return {a for a, e in cp.statement.measures
            if any(isinstance(n, Special) and n.kind.upper() == "MATCH_NUMBER" for n in walk(e))}


def _spans(times: list, gap: timedelta) -> list[tuple]:
    """``times`` (sorted) cut where two lie more than ``gap`` apart: (first, last) per cluster."""
    out: list[list] = []
    for t in times:
        t = pd.Timestamp(t)
        t = t.tz_localize("UTC") if t.tzinfo is None else t
        if out and t - out[-1][1] <= gap:
            out[-1][1] = t
        else:
            out.append([t, t])
    return [(a.to_pydatetime(), b.to_pydatetime()) for a, b in out]


def _anchored(frame: pd.DataFrame, pq: PatternQuery, ts_col: str, lo: datetime) -> pd.DataFrame:
    """``frame`` without each key's rows before its anchor: the last gap of at least
    WITHIN between consecutive rows of the key before ``lo``. A match's rows lie less
    than WITHIN apart from its first, so none straddles such a gap and the matcher's
    state after it is the live operator's (``PREV_ROWS`` rows before it are kept for
    PREV). A key without such a gap keeps every row read (the runs start at the same row
    either way; only where they start differs from the live operator's)."""
    if not len(frame):
        return frame
    w_ns = int(pq.within / timedelta(microseconds=1)) * 1000
    lo_ns = pd.Timestamp(lo).value
    ordered = frame.sort_values([ts_col, _RID], kind="stable")
    cols = list(pq.patterns[0].partition_by)
    parts = ordered.groupby(cols, sort=False, dropna=False) if cols else [((), ordered)]
    keep = []
    for _, part in parts:
        ts = pd.DatetimeIndex(pd.to_datetime(part[ts_col], utc=True)).asi8
        gaps = np.flatnonzero((np.diff(ts) >= w_ns) & (ts[1:] <= lo_ns))
        start = max(0, int(gaps[-1]) + 1 - PREV_ROWS) if len(gaps) else 0
        keep.append(part.iloc[start:])
    return pd.concat(keep)


def _keys(rows: pd.DataFrame, pq: PatternQuery) -> set[tuple]:
    cols = list(pq.patterns[0].partition_by)
    if not cols:
        return {()} if len(rows) else set()
    return {tuple(_plain(v) for v in r) for r in rows[cols].itertuples(index=False, name=None)}


def _in_keys(frame: pd.DataFrame, pq: PatternQuery, keys: set[tuple]) -> pd.Series:
    cols = list(pq.patterns[0].partition_by)
    if not cols:
        return pd.Series(True, index=frame.index)
    return pd.Series([tuple(_plain(v) for v in r) in keys for r in frame[cols].itertuples(index=False, name=None)],
                     index=frame.index)


def _flagged(frame: pd.DataFrame, removed, corrected) -> pd.DataFrame:
    """``frame`` (with ``_sid``) as the flags say it is, keeping the row ids."""
    from moirae.retract.flagged import apply_flags

    sids = set(frame["_sid"].astype("int64"))
    return apply_flags(frame, {s for s in removed if s in sids},
                       {s: v for s, v in corrected.items() if s in sids and s not in removed})


def _batch_id(rid: int, eids: Sequence[str]) -> int:
    """A batch id of the archive's log for the events a change raised: negative (never a
    live micro-batch's), the same for the same change and events (a repeat is a no-op)."""
    from ananke.ids import stable_id

    return -(abs(stable_id("retract-patterns", rid, *eids)) % (1 << 62)) - 1


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and np.isnan(v):
        return None
    return v


def _json(v):
    v = _plain(v)
    if isinstance(v, pd.Timestamp | datetime):
        return pd.Timestamp(v).isoformat()
    return v
