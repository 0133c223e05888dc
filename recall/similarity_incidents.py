"""Similarity Recall at incident level: the k most similar past *incidents* (M 3.3, 4.5.2).

An event-query fires once per window while its condition lasts, so the most similar
past *windows* of a new event are mostly adjacent windows of one past incident. This
module holds, for one recall task, the top k past incidents, each represented by its
best-scoring window, by the rule of :mod:`similarity.incidents`:

- the task reads history newest chunk first. Each chunk's detections are grouped on
  their own (:func:`similarity.incidents.chunk_groups`, once per chunk and cached with
  its index); an incident that spans a chunk boundary is merged when the older chunk
  arrives (its newest part there is within one step of the newer part's first
  detection, same key), and renamed to its earliest eid, as
  :class:`similarity.incidents.BackwardIncidents` does;
- the live event is added first, so its ongoing incident (the live event and the
  earlier windows that chain to it) is known and is never a result;
- after each chunk the held top k is recomputed from the held incidents and the
  chunk's incidents; the difference is emitted as DELETE (a row under its old key or
  with its old representative) and INSERT revisions (M 4.6), so the held set always
  equals the brute-force top k of incidents over the history read so far.

Only incidents that can still change are remembered besides those held: the oldest
incident of each key, while an older chunk may still extend it back (its first
detection is within one step of the oldest time read), so memory stays bounded by the
keys active near the boundary, even when every detection has a key of its own. Every other incident is
final, and below the k-th held one, and the held set never loses a slot (merging only
happens between a held or frontier incident and an older part), so it never re-enters.

Order of incidents: best window's score descending, then its time descending, then
incident id (as :class:`similarity.topk.Neighbour`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from similarity.incidents import ChunkGroups, IncidentRule, chunk_groups


@dataclass
class PastIncident:
    """One past incident as far as history has been read. Its best window's context and
    its windows' surrounding rows are looked up only when asked for (``context``,
    ``surrounding``): an incident that is never a result never builds them."""

    id: str
    score: float
    ts: int  # ns of the best window
    eid: str  # the best window
    first_ns: int
    last_ns: int
    windows: int
    key: str = ""
    live: bool = False
    contexts: Mapping[str, list] | None = field(default=None, repr=False)
    parts: list[tuple[Mapping[str, dict[str, list[dict]]], list[str]]] = field(default_factory=list, repr=False)
    """(surrounding rows by eid of one chunk, this incident's eids in that chunk)."""

    def rank(self) -> tuple:
        return (-self.score, -self.ts, self.eid)

    def key_order(self) -> tuple:
        return (-self.score, -self.ts, self.id)

    @property
    def context(self) -> list:
        """The best window's context."""
        return list((self.contexts or {}).get(self.eid, []))

    @property
    def surrounding(self) -> dict[str, list[dict]]:
        """Surrounding rows of every window, by stream."""
        out: dict[str, list[dict]] = {}
        for by_eid, eids in self.parts:
            for e in eids:
                for stream, rows in by_eid.get(e, {}).items():
                    out.setdefault(stream, []).extend(rows)
        return out

    def same(self, other: PastIncident) -> bool:
        return (self.id, self.eid, self.score, self.windows, self.first_ns) == (
            other.id, other.eid, other.score, other.windows, other.first_ns)

    def merged_into(self, older: PastIncident) -> PastIncident:
        """This (newer) part joined by ``older``, which names the whole incident."""
        best = older if older.rank() < self.rank() else self
        return PastIncident(older.id, best.score, best.ts, best.eid, min(self.first_ns, older.first_ns),
                            max(self.last_ns, older.last_ns), self.windows + older.windows, older.key,
                            self.live or older.live, best.contexts, [*self.parts, *older.parts])


@dataclass
class IncidentTop:
    """The held top ``k`` past incidents of one live event (module doc)."""

    k: int
    rule: IncidentRule
    live_eid: str
    live_key: str
    live_ts: Any
    distinct_keys: bool = False
    """Every past detection has a key of its own (no incident rule): no grouping to do."""
    held: list[PastIncident] = field(default_factory=list)
    frontier: dict[str, PastIncident] = field(default_factory=dict)  # key -> oldest incident of that key
    _live: str = ""

    def __post_init__(self) -> None:
        t = int(np.datetime64(self.live_ts, "ns").astype(np.int64))
        self._live = self.live_eid
        self.frontier[str(self.live_key)] = PastIncident(self.live_eid, 0.0, t, self.live_eid, t, t, 1,
                                                         str(self.live_key), live=True)

    @property
    def live_incident(self) -> str:
        """The id the live event's ongoing incident goes by now."""
        return self._live

    def offer(self, eids: Sequence[str], ts_ns: np.ndarray, keys: Sequence[str], scores: np.ndarray,
              surrounding: Mapping[str, dict[str, list[dict]]] | None = None,
              contexts: Mapping[str, list] | None = None,
              groups: ChunkGroups | None = None) -> tuple[list[PastIncident], list[PastIncident]]:
        """One chunk's past detections (no newer, per key, than any offered before) and
        their scores; ``groups`` their incidents within the chunk if known already
        (:func:`similarity.incidents.chunk_groups` of the same detections). Returns
        ``(deleted, inserted)``: rows to retract (as held before) and rows to emit (as
        held now), each best first.

        Vectorised: per chunk, array passes over its detections and incidents; objects
        are made only for incidents that can enter the top k or reach an older chunk."""
        n = len(eids)
        if n == 0:
            return [], []
        eids = np.asarray(eids, dtype=object)
        ts = np.asarray(ts_ns, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        keys = np.asarray(keys, dtype=object)
        g = groups if groups is not None else chunk_groups(keys, ts, eids, self.rule, self.distinct_keys)
        best = g.best(scores)
        step = self.rule.step_ns
        # 1. links: the newest incident of a frontier key joins that key's frontier incident
        fkeys = list(self.frontier)
        pos = pd.Index(fkeys, dtype=object).get_indexer(g.key.astype(str)) if fkeys else np.full(g.m, -1)
        linked: dict[int, PastIncident] = {}  # chunk incident -> the newer part it joins
        hit = np.flatnonzero(pos >= 0)
        if hit.size:
            newest: dict[int, int] = {}
            for j, f in zip(hit.tolist(), pos[hit].tolist(), strict=True):
                if f not in newest or g.last_ns[j] > g.last_ns[newest[f]]:
                    newest[f] = j
            for f, j in newest.items():
                part = self.frontier[fkeys[f]]
                if part.first_ns - int(g.last_ns[j]) <= step:
                    linked[j] = part
        live_j = [j for j, p in linked.items() if p.live]
        # 2. candidates: incidents that may be in the top k now, and those an older chunk may extend
        eff = best.copy()
        for j, p in linked.items():
            eff[j] = max(eff[j], p.score)
        eff[live_j] = 0.0
        want = set(linked)
        pos_idx = np.flatnonzero(eff > 0)
        if pos_idx.size > self.k:
            kth = np.partition(eff[pos_idx], pos_idx.size - self.k)[pos_idx.size - self.k]
            pos_idx = pos_idx[eff[pos_idx] >= kth]
        want.update(pos_idx.tolist())
        reach = int(ts.min()) + step
        near = np.flatnonzero(g.first_ns < reach)
        want.update(near.tolist())
        made = {j: self._incident(g, j, eids, ts, scores, surrounding, contexts) for j in sorted(want)}
        renamed: dict[str, PastIncident] = {}
        for j, part in linked.items():
            made[j] = part.merged_into(made[j])
            renamed[part.id] = made[j]
            if part.live:
                self._live = made[j].id
        # 3. the held top k over held (as merged) and this chunk's candidates
        pool = {q.id: q for q in (renamed.get(p.id, p) for p in self.held)}
        pool.update({p.id: p for p in made.values()})
        ranked = sorted((p for p in pool.values() if p.score > 0 and not p.live), key=PastIncident.key_order)
        old_held = self.held
        self.held = ranked[: self.k]
        # 4. the frontier: per key the oldest incident still within a step of the oldest time read
        frontier = {k: p for k, p in self.frontier.items() if p.first_ns < reach and k not in
                    set(g.key[pos >= 0].astype(str).tolist())} if fkeys else {}
        for j in sorted(near.tolist(), key=lambda j: -int(g.first_ns[j])):
            frontier[str(g.key[j])] = made[j]
        self.frontier = frontier
        was = {p.id: p for p in old_held}
        now = {p.id: p for p in self.held}
        deleted = [p for p in old_held if p.id not in now or not now[p.id].same(p)]
        inserted = [p for p in self.held if p.id not in was or not was[p.id].same(p)]
        return deleted, inserted

    def _incident(self, g: ChunkGroups, j: int, eids: np.ndarray, ts: np.ndarray, scores: np.ndarray,
                  surrounding: Mapping | None, contexts: Mapping | None) -> PastIncident:
        rows = g.order[g.starts[j]:g.starts[j + 1]]
        r = min(rows.tolist(), key=lambda i: (-scores[i], -ts[i], eids[i]))
        parts = [(surrounding, [str(e) for e in eids[rows].tolist()])] if surrounding else []
        return PastIncident(str(g.ids[j]), float(scores[r]), int(ts[r]), str(eids[r]), int(g.first_ns[j]),
                            int(g.last_ns[j]), int(rows.shape[0]), str(g.key[j]), False, contexts, parts)


def resolution_of(inc: PastIncident, recorded: Mapping[str, str] | None = None) -> str | None:
    """The incident's resolution: recorded through the incident store (by its id or the
    best window's eid) first, else the first ``resolution`` value found in any window's
    surrounding rows."""
    if recorded:
        for i in (inc.id, inc.eid):
            if recorded.get(i):
                return str(recorded[i])
    for rows in inc.surrounding.values():
        for r in rows:
            v = r.get("resolution")
            if v not in (None, ""):
                return str(v)
    return None


ResolutionLookup = Callable[[Sequence[str]], Mapping[str, str]]
