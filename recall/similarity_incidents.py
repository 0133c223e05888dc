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


def _objs(items: list) -> np.ndarray:
    """A 1-d object array of ``items`` (lists stay elements, not a dimension)."""
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out


_COLS = ("key", "id", "score", "ts", "eid", "first", "last", "windows", "live", "src", "parts")


@dataclass
class _Incidents:
    """Incidents as columns (one entry per incident): the frontier of a task, and a
    chunk's incidents while it is offered. ``src`` names the chunk whose context
    mapping holds the best window; ``parts`` (object, or None when no chunk had
    surrounding rows) the windows' surrounding sources."""

    key: np.ndarray
    id: np.ndarray
    score: np.ndarray
    ts: np.ndarray
    eid: np.ndarray
    first: np.ndarray
    last: np.ndarray
    windows: np.ndarray
    live: np.ndarray
    src: np.ndarray
    parts: np.ndarray

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def columns(self) -> tuple[np.ndarray, ...]:
        """The columns in ``_COLS`` order."""
        return (self.key, self.id, self.score, self.ts, self.eid, self.first, self.last, self.windows, self.live,
                self.src, self.parts)

    def take(self, idx: np.ndarray) -> _Incidents:
        return _Incidents(*[col[idx] for col in self.columns()])

    @staticmethod
    def concat(a: _Incidents, b: _Incidents) -> _Incidents:
        return _Incidents(*[np.concatenate((x, y)) for x, y in zip(a.columns(), b.columns(), strict=True)])


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
    frontier: _Incidents = field(init=False)
    """Per key, the oldest incident while an older chunk may still extend it back."""
    _live: str = ""
    _sources: dict[int, tuple[Mapping | None, Mapping | None]] = field(default_factory=dict)
    _next: int = 0
    _tracking: bool = False  # some chunk had surrounding rows: windows are remembered per incident

    def __post_init__(self) -> None:
        t = int(np.datetime64(self.live_ts, "ns").astype(np.int64))
        self._live = self.live_eid
        self._sources[-1] = (None, None)
        self.frontier = _Incidents(_objs([str(self.live_key)]), _objs([self.live_eid]), np.zeros(1), np.asarray([t]),
                                   _objs([self.live_eid]), np.asarray([t]), np.asarray([t]),
                                   np.ones(1, dtype=np.int64), np.ones(1, dtype=bool), np.asarray([-1]), _objs([None]))

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

        Vectorised: array passes over the chunk's detections and incidents and over the
        frontier; Python objects only for the incidents that enter the top k."""
        if len(eids) == 0:
            return [], []
        eids = np.asarray(eids, dtype=object)
        ts = np.asarray(ts_ns, dtype=np.int64)
        c = self._chunk_incidents(eids, ts, keys, np.asarray(scores, dtype=np.float64), surrounding, contexts, groups)
        f = self.frontier
        fpos = _positions(f.key, c.key)
        renamed = self._link(c, f, fpos)
        old_held = self.held
        self.held = self._ranked(c, renamed)
        self._advance_frontier(c, f, fpos, int(ts.min()))
        was = {p.id: p for p in old_held}
        now = {p.id: p for p in self.held}
        deleted = [p for p in old_held if p.id not in now or not now[p.id].same(p)]
        inserted = [p for p in self.held if p.id not in was or not was[p.id].same(p)]
        return deleted, inserted

    def _chunk_incidents(self, eids: np.ndarray, ts: np.ndarray, keys: Sequence[str], scores: np.ndarray,
                         surrounding: Mapping[str, dict[str, list[dict]]] | None,
                         contexts: Mapping[str, list] | None, groups: ChunkGroups | None) -> _Incidents:
        """The chunk's incidents as columns, each represented by its best window; the
        chunk's context and surrounding rows are remembered under a new source number."""
        g = groups if groups is not None else chunk_groups(np.asarray(keys, dtype=object), ts, eids, self.rule,
                                                           self.distinct_keys)
        src = self._next
        self._next += 1
        self._sources[src] = (contexts, surrounding or None)
        best = g.best(scores)
        rep = g.representatives(scores, best)
        m = g.m
        self._tracking = self._tracking or bool(surrounding)
        if self._tracking and surrounding:
            ordered, bounds = eids[g.order].tolist(), g.starts.tolist()
            parts = _objs([[(src, ordered[a:b])] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
        else:
            parts = np.full(m, None, dtype=object)
        return _Incidents(g.key, g.ids, best, ts[rep], eids[rep], g.first_ns.copy(),
                          g.last_ns.copy(), g.count.astype(np.int64), np.zeros(m, dtype=bool), np.full(m, src), parts)

    def _link(self, c: _Incidents, f: _Incidents, fpos: np.ndarray) -> dict[str, int]:
        """The newest chunk incident of each frontier key joins that key's frontier
        incident when within a step (in place, in ``c``); returns ``{frontier id: chunk
        incident}`` of the joined ones. The live incident follows its renames."""
        idx = np.flatnonzero(fpos >= 0)
        if not idx.size:
            return {}
        idx = idx[np.lexsort((c.last[idx], fpos[idx]))]
        fp = fpos[idx]
        newest = np.append(fp[1:] != fp[:-1], True)
        j, fj = idx[newest], fp[newest]
        ok = f.first[fj] - c.last[j] <= self.rule.step_ns
        j, fj = j[ok], fj[ok]
        if not j.size:
            return {}
        better = (f.score[fj] > c.score[j]) | ((f.score[fj] == c.score[j]) & (
            (f.ts[fj] > c.ts[j]) | ((f.ts[fj] == c.ts[j]) & (f.eid[fj] < c.eid[j]).astype(bool))))
        for col in ("score", "ts", "eid", "src"):
            getattr(c, col)[j] = np.where(better, getattr(f, col)[fj], getattr(c, col)[j])
        c.last[j] = np.maximum(c.last[j], f.last[fj])
        c.windows[j] += f.windows[fj]
        c.live[j] |= f.live[fj]
        if self._tracking:
            c.parts[j] = _objs([(a or []) + (b or []) for a, b in zip(c.parts[j].tolist(), f.parts[fj].tolist(),
                                                                      strict=True)])
        for jj in j[c.live[j]].tolist():
            self._live = str(c.id[jj])
        return dict(zip(f.id[fj].tolist(), j.tolist(), strict=True))

    def _ranked(self, c: _Incidents, renamed: dict[str, int]) -> list[PastIncident]:
        """The top k over the held incidents (as merged) and the chunk's best ones."""
        eff = np.where(c.live, 0.0, c.score)
        cand = np.flatnonzero(eff > 0)
        if cand.size > self.k:
            kth = np.partition(eff[cand], cand.size - self.k)[cand.size - self.k]
            cand = cand[eff[cand] >= kth]
        want = set(cand.tolist()) | {renamed[p.id] for p in self.held if p.id in renamed}
        made = {j: self._made(c, j) for j in want}
        pool = {}
        for p in self.held:
            q = made[renamed[p.id]] if p.id in renamed else p
            pool[q.id] = q
        pool.update({p.id: p for p in made.values()})
        ranked = sorted((p for p in pool.values() if p.score > 0 and not p.live), key=PastIncident.key_order)
        return ranked[: self.k]

    def _advance_frontier(self, c: _Incidents, f: _Incidents, fpos: np.ndarray, oldest_ns: int) -> None:
        """Per key, keep the oldest incident still within a step of the oldest time read
        (``oldest_ns``); forget the sources no kept incident needs."""
        reach = oldest_ns + self.rule.step_ns
        near = np.flatnonzero(c.first < reach)
        if near.size > 1:
            near = near[np.argsort(c.first[near], kind="stable")]
            near = near[_first_of_each(c.key[near])]
        stay = f.first < reach
        stay[fpos[fpos >= 0]] = False  # a frontier key the chunk has moves on to the chunk's incident
        # A chunk is a few detections: most chunks keep no frontier incident and add none,
        # so the frontier's columns are rebuilt only when it holds any (same result)
        if not stay.any():
            self.frontier = c.take(near)
        elif near.size == 0 and stay.all():
            self.frontier = f
        else:
            self.frontier = _Incidents.concat(f.take(np.flatnonzero(stay)), c.take(near))
        keep = set(self.frontier.src.tolist())
        if len(self._sources) > len(keep) + 1 or not keep <= self._sources.keys():
            self._sources = {s: v for s, v in self._sources.items() if s in keep or s == -1}

    def _made(self, c: _Incidents, j: int) -> PastIncident:
        contexts = self._sources[int(c.src[j])][0]
        parts = [(self._sources[s][1] or {}, e) for s, e in c.parts[j]] if c.parts[j] else []
        return PastIncident(str(c.id[j]), float(c.score[j]), int(c.ts[j]), str(c.eid[j]), int(c.first[j]),
                            int(c.last[j]), int(c.windows[j]), str(c.key[j]), bool(c.live[j]), contexts, parts)


# A chunk holds a few detections and the frontier a few keys, so the two lookups below
# are plain dicts: building a pandas Index per chunk would cost more than the lookups
# and release the GIL to Spark's threads in the engine's driver.

def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each of ``wanted``'s place in ``keys`` (distinct), -1 where absent."""
    at = {k: i for i, k in enumerate(keys.tolist())}
    return np.fromiter((at.get(k, -1) for k in wanted.tolist()), dtype=np.int64, count=len(wanted))


def _first_of_each(keys: np.ndarray) -> np.ndarray:
    """The positions of each key's first occurrence, in order.

    >>> _first_of_each(np.array(["a", "b", "a", "c", "b"], dtype=object)).tolist()
    [0, 1, 3]
    """
    first: dict = {}
    for i, k in enumerate(keys.tolist()):
        first.setdefault(k, i)
    return np.fromiter(first.values(), dtype=np.int64, count=len(first))


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
