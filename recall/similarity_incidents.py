"""Similarity Recall at incident level: the k most similar past *incidents* (M 3.3, 4.5.2).

An event-query fires once per window while its condition lasts, so the most similar
past *windows* of a new event are mostly adjacent windows of one past incident. This
module holds, for one recall task, the top k past incidents, each represented by its
best-scoring window, by the rule of :mod:`similarity.incidents`:

- the task reads history newest chunk first, so detections are grouped with
  :class:`similarity.incidents.BackwardIncidents`: an incident that spans a chunk
  boundary is merged when the older chunk arrives, and renamed to its earliest eid;
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

from similarity.incidents import BackwardIncidents, IncidentRule


@dataclass
class PastIncident:
    """One past incident as far as history has been read."""

    id: str
    score: float
    ts: int  # ns of the best window
    eid: str  # the best window
    first_ns: int
    last_ns: int
    windows: int
    surrounding: dict[str, list[dict]] = field(default_factory=dict)
    context: list = field(default_factory=list)  # the best window's context

    def key(self) -> tuple:
        return (-self.score, -self.ts, self.id)

    def same(self, other: PastIncident) -> bool:
        return (self.id, self.eid, self.score, self.windows, self.first_ns) == (
            other.id, other.eid, other.score, other.windows, other.first_ns)


@dataclass
class IncidentTop:
    """The held top ``k`` past incidents of one live event (module doc)."""

    k: int
    rule: IncidentRule
    live_eid: str
    live_key: str
    live_ts: Any
    backward: BackwardIncidents = field(init=False)
    held: list[PastIncident] = field(default_factory=list)
    frontier: dict[str, PastIncident] = field(default_factory=dict)  # key -> oldest incident of that key

    def __post_init__(self) -> None:
        self.backward = BackwardIncidents(self.rule)
        self.backward.add_older([self.live_key], [self.live_ts], [self.live_eid])

    @property
    def live_incident(self) -> str:
        """The id the live event's ongoing incident goes by now."""
        return self.backward.current(self.live_eid)

    def offer(self, eids: Sequence[str], ts_ns: np.ndarray, keys: Sequence[str], scores: np.ndarray,
              surrounding: Mapping[str, dict[str, list[dict]]] | None = None,
              contexts: Mapping[str, list] | None = None) -> tuple[list[PastIncident], list[PastIncident]]:
        """One chunk's past detections (no newer, per key, than any offered before) and
        their scores. Returns ``(deleted, inserted)``: rows to retract (as held before)
        and rows to emit (as held now), each best first."""
        if len(eids) == 0:
            return [], []
        ids, renames = self.backward.add_older(list(keys), ts_ns.astype("datetime64[ns]"), list(eids))
        live = self.live_incident
        old_held = list(self.held)
        pool: dict[str, PastIncident] = {}
        for inc in [*self.held, *self.frontier.values()]:
            new_id = self.backward.current(inc.id)
            if new_id in pool:  # a held incident that is also its key's frontier
                continue
            pool[new_id] = PastIncident(new_id, inc.score, inc.ts, inc.eid, inc.first_ns, inc.last_ns,
                                        inc.windows, {s: list(r) for s, r in inc.surrounding.items()}, inc.context)
        frame = pd.DataFrame({"id": np.asarray(ids, dtype=object), "k": np.asarray(keys, dtype=object),
                              "e": np.asarray(eids, dtype=object), "t": np.asarray(ts_ns, dtype=np.int64),
                              "s": np.asarray(scores, dtype=np.float64)})
        frame = frame[frame["id"] != live]
        surrounding = surrounding or {}
        if not frame.empty:
            best = frame.sort_values(["s", "t", "e"], ascending=[False, False, True]).drop_duplicates("id")
            agg = frame.groupby("id", sort=False).agg(first=("t", "min"), last=("t", "max"), n=("e", "size"))
            members = frame.groupby("id", sort=False)["e"].agg(list) if surrounding else None
            for iid, e, t, s in best[["id", "e", "t", "s"]].itertuples(index=False):
                a = agg.loc[iid]
                sur: dict[str, list[dict]] = {}
                if members is not None:
                    for m in members.loc[iid]:
                        for stream, rows in surrounding.get(m, {}).items():
                            sur.setdefault(stream, []).extend(rows)
                part = PastIncident(str(iid), float(s), int(t), str(e), int(a["first"]), int(a["last"]),
                                    int(a["n"]), sur, list((contexts or {}).get(e, [])))
                cur = pool.get(part.id)
                if cur is None:
                    pool[part.id] = part
                else:
                    better = part if part.key()[:2] < cur.key()[:2] or (
                        part.key()[:2] == cur.key()[:2] and part.eid < cur.eid) else cur
                    for stream, rows in part.surrounding.items():
                        cur.surrounding.setdefault(stream, []).extend(rows)
                    pool[part.id] = PastIncident(part.id, better.score, better.ts, better.eid,
                                                 min(cur.first_ns, part.first_ns), max(cur.last_ns, part.last_ns),
                                                 cur.windows + part.windows, cur.surrounding, better.context)
            oldest = frame.sort_values("t").drop_duplicates("k")
            for k, iid in zip(oldest["k"], oldest["id"], strict=True):
                self.frontier[str(k)] = pool[str(iid)]
        for k, inc in list(self.frontier.items()):
            self.frontier[k] = pool.get(self.backward.current(inc.id), inc)
        if not frame.empty:  # older chunks hold only times below this chunk's oldest detection
            reach = int(frame["t"].min()) + self.rule.step_ns
            self.frontier = {k: inc for k, inc in self.frontier.items() if inc.first_ns < reach}
        ranked = sorted((p for p in pool.values() if p.score > 0), key=PastIncident.key)
        self.held = ranked[: self.k]
        was = {p.id: p for p in old_held}
        now = {p.id: p for p in self.held}
        deleted = [p for p in old_held if p.id not in now or not now[p.id].same(p)]
        inserted = [p for p in self.held if p.id not in was or not was[p.id].same(p)]
        del renames  # the renames are implied by the held ids (current())
        return deleted, inserted


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
