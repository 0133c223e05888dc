"""Incidents: consecutive detections of one key, grouped (M 3.3).

An event-query fires once per window while its condition lasts, so one overload of
one server is five or ten events. An on-call engineer thinks in *incidents*: what the
Moirae paper calls "the incident on that server", with its one resolution (M 3.3).

**The rule.** Two detections of the same key belong to the same incident when their
windows touch or overlap, allowing ``gap`` of silence between them. Detections carry
their window's end as ``ts`` and every window is ``window`` long, so detections at
``t1 <= t2`` are linked when ``t2 - t1 <= window + gap`` (:attr:`IncidentRule.step`).
An incident is a maximal chain of linked detections of one key. The default ``gap`` is
one window: a single quiet window does not split an incident.

**Identity.** An incident's id is the eid of its earliest detection (ties: the smallest
eid), so every component that applies the rule to the same detections names the same
incidents: the live tracker, the console's store, and a Similarity Recall task that
meets past detections newest chunk first.

Three ways to apply it, all pure:

- :func:`group`: a whole set of detections at once (vectorised);
- :class:`IncidentTracker`: live detections in time order, one at a time, and
  :class:`LiveIncidents`, one tracker per event type with bounded memory (the one live
  tracker the incident store and the terminal board share);
- :class:`BackwardIncidents`: history met newest first, batch by batch, as a recall
  task reads chunks; merging across batches renames incidents, and says so.

>>> rule = IncidentRule(keys=("sid",), window=timedelta(minutes=5))
>>> t0 = np.datetime64("2026-01-01T00:00", "ns")
>>> m5 = np.timedelta64(5, "m")
>>> ids = group(["a", "a", "a", "b", "a"], [t0, t0 + m5, t0 + 2 * m5, t0 + m5, t0 + 9 * m5],
...             ["e1", "e2", "e3", "e4", "e5"], rule)
>>> list(ids)
['e1', 'e1', 'e1', 'e4', 'e5']
>>> rule.key_of({"sid": "a", "avg_bw": 9.5})
'a'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from similarity.errors import InvalidSimilarityConfig


@dataclass(frozen=True)
class IncidentRule:
    """How detections of one event type group into incidents.

    ``keys`` are the attributes that say what an incident is about (a server's
    ``sid``); with no keys every detection of the type shares one key. ``window`` is
    the event-query's window length; ``gap`` the silence allowed between two windows of
    one incident (default: one window; the engine sets the event-query's slide,
    :mod:`moirae.incidents.rules`).
    """

    keys: tuple[str, ...]
    window: timedelta
    gap: timedelta | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            object.__setattr__(self, "keys", (self.keys,))
        if not isinstance(self.window, timedelta) or self.window <= timedelta(0):
            raise InvalidSimilarityConfig(f"incident rule: window must be a positive duration, got {self.window!r}")
        if self.gap is not None and (not isinstance(self.gap, timedelta) or self.gap < timedelta(0)):
            raise InvalidSimilarityConfig(f"incident rule: gap must be a duration >= 0, got {self.gap!r}")

    @property
    def step(self) -> timedelta:
        """The largest distance between two linked detections' times."""
        return self.window + (self.window if self.gap is None else self.gap)

    @cached_property
    def step_ns(self) -> int:
        """:attr:`step` in nanoseconds (read once per chunk a task scores: computed once)."""
        return int(self.step / timedelta(microseconds=1)) * 1000

    def key_of(self, attrs: Mapping[str, Any]) -> str:
        """The incident key of one detection's attributes: the value itself for one key
        attribute, a JSON list for several, ``""`` for none. Names a missing key."""
        missing = [k for k in self.keys if k not in attrs]
        if missing:
            raise InvalidSimilarityConfig(f"incident rule: detection has no key attribute {missing[0]!r} "
                                          f"(attributes: {sorted(attrs)})")
        if len(self.keys) == 1:
            return str(attrs[self.keys[0]])
        return json.dumps([attrs[k] for k in self.keys], default=str) if self.keys else ""


def _ns(ts: Any) -> np.ndarray:
    """Times as int64 nanoseconds since the epoch (naive times are taken as UTC)."""
    s = pd.to_datetime(pd.Series(np.asarray(ts) if not isinstance(ts, pd.Series) else ts), utc=True)
    return s.to_numpy(dtype="datetime64[ns]").astype(np.int64)


def group(keys: Sequence[Any], ts: Sequence[Any], eids: Sequence[Any], rule: IncidentRule) -> np.ndarray:
    """The incident id of each detection (aligned with the inputs), by the rule over
    exactly these detections. Vectorised: one sort (of codes, not of a frame), one pass."""
    n = len(eids)
    if not (len(keys) == len(ts) == n):
        raise ValueError(f"group: keys, ts and eids differ in length ({len(keys)}, {len(ts)}, {n})")
    if n == 0:
        return np.empty(0, dtype=object)
    k = pd.Series(keys, dtype=object).astype(str).to_numpy()
    e = pd.Series(eids, dtype=object).astype(str).to_numpy()
    # by key, time, eid (codes of sorted uniques order as the texts do; lexsort is stable)
    kc, ec = pd.factorize(k, sort=True)[0], pd.factorize(e, sort=True)[0]
    t = _ns(ts)
    order = np.lexsort((ec, t, kc))
    kc, t = kc[order], t[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (kc[1:] != kc[:-1]) | (np.diff(t) > rule.step_ns)
    first = e[order][starts]
    out = np.empty(n, dtype=object)
    out[order] = first[np.cumsum(starts) - 1]
    return out


@dataclass
class _Open:
    incident: str
    first_ns: int
    last_ns: int
    count: int = 1


@dataclass(frozen=True)
class Assignment:
    """Where a live detection went: its incident, and whether it opened it."""

    incident: str
    opened: bool
    count: int


@dataclass
class IncidentTracker:
    """Live assignment of detections, one at a time, in time order per key.

    Detections of a key arrive in time order in a monitoring stream (windows close in
    watermark order). One arriving out of order still joins the incident it links to;
    an earlier one that links to nothing opens an incident of its own. Keys whose last
    detection is more than a step behind the watermark are closed by :meth:`close_before`,
    which bounds memory by the keys alive in one step.

    >>> tr = IncidentTracker(IncidentRule(("sid",), timedelta(minutes=5)))
    >>> t0 = np.datetime64("2026-01-01T00:05", "ns")
    >>> [tr.assign(e, "a", t0 + np.timedelta64(i * 5, "m")).incident for i, e in enumerate(["x", "y"])]
    ['x', 'x']
    >>> tr.assign("z", "a", t0 + np.timedelta64(60, "m")).opened
    True
    """

    rule: IncidentRule
    _open: dict[str, _Open] = field(default_factory=dict)

    def assign(self, eid: str, key: str, ts: Any) -> Assignment:
        t = int(_ns([ts])[0])
        cur = self._open.get(key)
        step = self.rule.step_ns
        if cur is not None and cur.first_ns - step <= t <= cur.last_ns + step:
            cur.first_ns, cur.last_ns, cur.count = min(cur.first_ns, t), max(cur.last_ns, t), cur.count + 1
            return Assignment(cur.incident, False, cur.count)
        if cur is not None and t < cur.first_ns:  # a late detection from before the open incident
            return Assignment(str(eid), True, 1)
        self._open[key] = _Open(str(eid), t, t)
        return Assignment(str(eid), True, 1)

    def restore(self, key: str, incident: str, first_ts: Any, last_ts: Any, count: int) -> None:
        """Reopen an incident after a restart (from the store)."""
        self._open[key] = _Open(incident, int(_ns([first_ts])[0]), int(_ns([last_ts])[0]), count)

    def close_before(self, watermark: Any) -> list[str]:
        """Forget incidents that no future detection can join; return their ids."""
        w = int(_ns([watermark])[0]) - self.rule.step_ns
        done = [k for k, o in self._open.items() if o.last_ns < w]
        return [self._open.pop(k).incident for k in done]

    def open_count(self) -> int:
        """How many keys have an open incident (the tracker's memory)."""
        return len(self._open)

    def open_incident(self, key: str) -> str | None:
        cur = self._open.get(key)
        return None if cur is None else cur.incident


CLOSE_AFTER_STEPS = 2
"""A key's incident leaves the live tracker this many steps after its last detection."""


@dataclass(frozen=True)
class LiveAssignment:
    """Where a live detection of one event type went: its incident key, its incident,
    whether it opened it, the incident's detection count so far, and why the detection
    has no key of its own (None when it has one; it is then keyed by its eid)."""

    key: str
    incident: str
    opened: bool
    count: int
    unkeyed: str | None = None


class LiveIncidents:
    """Live assignment of the detections of every event type: one
    :class:`IncidentTracker` per type, made on the type's first detection with the rule
    ``rule_of(event, attrs)`` gives (``reopen(event, tracker)`` may then restore the
    incidents it held before a restart). A detection without the rule's key attributes
    is its own incident (keyed by its eid).

    Memory is bounded by :meth:`close`: given the type's newest detection time, it
    forgets the keys whose incident no coming detection can join, those whose last
    detection is more than ``close_after_steps`` steps behind it. Detections arrive in
    window-close order, so one more than a step behind the newest is not expected; the
    second step is margin.

    >>> live = LiveIncidents(lambda event, attrs: IncidentRule(("sid",), timedelta(minutes=5)))
    >>> t0 = np.datetime64("2026-01-01T00:05", "ns")
    >>> live.assign("overload", "x", {"sid": "a"}, t0).incident
    'x'
    >>> live.assign("overload", "y", {"sid": "a"}, t0 + np.timedelta64(5, "m")).incident
    'x'
    >>> live.assign("overload", "z", {}, t0).unkeyed is not None
    True
    """

    def __init__(self, rule_of: Callable[[str, Mapping[str, Any]], IncidentRule], *,
                 reopen: Callable[[str, IncidentTracker], None] | None = None,
                 close_after_steps: int = CLOSE_AFTER_STEPS) -> None:
        self.rule_of = rule_of
        self.reopen = reopen
        self.close_after_steps = close_after_steps
        self._trackers: dict[str, IncidentTracker] = {}

    def tracker(self, event: str, attrs: Mapping[str, Any]) -> IncidentTracker:
        """The event type's tracker, made (and reopened) on first use."""
        tr = self._trackers.get(event)
        if tr is None:
            tr = self._trackers[event] = IncidentTracker(self.rule_of(event, attrs))
            if self.reopen is not None:
                self.reopen(event, tr)
        return tr

    def assign(self, event: str, eid: str, attrs: Mapping[str, Any], ts: Any) -> LiveAssignment:
        """Assign one detection (in time order per key) to its incident."""
        tr = self.tracker(event, attrs)
        unkeyed = None
        try:
            key = tr.rule.key_of(attrs)
        except InvalidSimilarityConfig as exc:
            key, unkeyed = str(eid), str(exc)
        a = tr.assign(str(eid), key, ts)
        return LiveAssignment(key, a.incident, a.opened, a.count, unkeyed)

    def horizon(self, rule: IncidentRule) -> timedelta:
        """How far behind the newest detection an incident can still be joined."""
        return self.close_after_steps * rule.step

    def close(self, event: str, newest: Any) -> list[str]:
        """Forget the event type's incidents that no detection after ``newest`` can
        join; returns their ids."""
        tr = self._trackers.get(event)
        if tr is None:
            return []
        return tr.close_before(pd.Timestamp(newest) - (self.close_after_steps - 1) * tr.rule.step)

    def forget(self, event: str) -> None:
        """Drop the event type's tracker (its rule changed)."""
        self._trackers.pop(event, None)

    def open_count(self, event: str) -> int:
        """How many keys the event type's tracker holds open."""
        tr = self._trackers.get(event)
        return 0 if tr is None else tr.open_count()


@dataclass
class BackwardIncidents:
    """Incidents of history met newest first, batch by batch (one batch per chunk).

    Each batch must be no newer, per key, than everything added before it (chunks are
    read newest first). An incident that spans a batch boundary is found when the
    older batch arrives: the newer part's id (its earliest eid so far) is then renamed
    to the older part's, and :meth:`add_older` reports the renames so a Similarity
    Recall can retract and re-emit what it held under the old id.

    After every batch, the ids equal :func:`group` over all detections added so far.

    >>> b = BackwardIncidents(IncidentRule(("sid",), timedelta(minutes=5)))
    >>> t = lambda m: np.datetime64("2026-01-01T00:00", "ns") + np.timedelta64(m, "m")
    >>> ids, renames = b.add_older(["a", "a"], [t(30), t(35)], ["e7", "e8"])
    >>> list(ids), renames
    (['e7', 'e7'], {})
    >>> ids, renames = b.add_older(["a"], [t(25)], ["e6"])
    >>> list(ids), renames
    (['e6'], {'e7': 'e6'})
    """

    rule: IncidentRule
    _earliest: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> (first ns, incident id)
    _renamed: dict[str, str] = field(default_factory=dict)

    def add_older(self, keys: Sequence[Any], ts: Sequence[Any], eids: Sequence[Any]) -> tuple[np.ndarray, dict[str, str]]:
        """Incident ids of this batch's detections, and ``{old id: new id}`` for
        incidents of earlier batches that this batch extends back in time."""
        ids = group(keys, ts, eids, self.rule)
        if len(ids) == 0:
            return ids, {}
        frame = pd.DataFrame({"k": pd.Series(keys, dtype=object).astype(str).to_numpy(), "t": _ns(ts),
                              "id": ids})
        per = frame.groupby(["k", "id"], sort=False)["t"].agg(["min", "max"]).reset_index()
        newest = per.sort_values(["k", "max"]).drop_duplicates("k", keep="last")
        oldest = per.sort_values(["k", "min"]).drop_duplicates("k", keep="first").set_index("k")
        renames: dict[str, str] = {}
        step = self.rule.step_ns
        for k, new_id, new_max in zip(newest["k"], newest["id"], newest["max"], strict=True):
            prev = self._earliest.get(k)
            if prev is not None:
                if int(new_max) > prev[0]:
                    raise ValueError(f"BackwardIncidents: key {k!r} has a detection at {int(new_max)} ns, newer "
                                     f"than one added before ({prev[0]} ns); add batches newest first")
                if prev[0] - int(new_max) <= step:
                    renames[prev[1]] = str(new_id)
        for k, first_ns, first_id in zip(oldest.index, oldest["min"], oldest["id"], strict=True):
            self._earliest[k] = (int(first_ns), str(first_id))
        for old, new in renames.items():
            for o in [o for o, n in self._renamed.items() if n == old]:
                self._renamed[o] = new
            self._renamed[old] = new
        return ids, renames

    def current(self, incident: str) -> str:
        """The id an incident of an earlier batch goes by now."""
        return self._renamed.get(incident, incident)


@dataclass(frozen=True, eq=False)
class ChunkGroups:
    """The incidents of one batch of detections on their own (:func:`group` over just
    these), as arrays: what a recall task needs per chunk, computed once per chunk.

    ``code[i]`` is detection ``i``'s incident (0..m-1); ``order`` lists detections by
    incident, incident ``j`` owning ``order[starts[j]:starts[j + 1]]``; per incident:
    ``ids`` (its id), ``key``, ``first_ns``, ``last_ns`` and ``count``. ``rank[i]`` is
    detection ``i``'s place by time descending, then eid ascending (``by_rank`` the
    inverse): the tie order of windows with equal scores.
    """

    code: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    ids: np.ndarray
    key: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    rank: np.ndarray
    by_rank: np.ndarray

    @property
    def m(self) -> int:
        return int(self.ids.shape[0])

    @property
    def count(self) -> np.ndarray:
        return np.diff(self.starts)

    def best(self, scores: np.ndarray) -> np.ndarray:
        """Each incident's highest score."""
        if self.m == 0:
            return np.zeros(0)
        return np.maximum.reduceat(np.asarray(scores, dtype=np.float64)[self.order], self.starts[:-1])

    def representatives(self, scores: np.ndarray, best: np.ndarray) -> np.ndarray:
        """Each incident's best window (a detection index): highest score, then newest,
        then smallest eid."""
        if self.m == 0:
            return np.zeros(0, dtype=np.int64)
        s = np.asarray(scores, dtype=np.float64)[self.order]
        r = np.where(s == np.repeat(best, self.count), self.rank[self.order], self.rank.shape[0])
        return self.by_rank[np.minimum.reduceat(r, self.starts[:-1])]


def chunk_groups(keys: Sequence[Any], ts_ns: np.ndarray, eids: Sequence[Any], rule: IncidentRule,
                 distinct_keys: bool = False) -> ChunkGroups:
    """:class:`ChunkGroups` of one batch (``ts_ns``: int64 nanoseconds). With
    ``distinct_keys`` (every detection has a key of its own) each is its own incident.

    >>> rule = IncidentRule(keys=("sid",), window=timedelta(minutes=5))
    >>> m = 60 * 10**9
    >>> g = chunk_groups(["a", "a", "b"], np.array([0, 5 * m, 5 * m]), ["e1", "e2", "e3"], rule)
    >>> list(g.ids), g.code.tolist(), g.count.tolist(), g.last_ns.tolist() == [5 * m, 5 * m]
    (['e1', 'e3'], [0, 0, 1], [2, 1], True)
    """
    ts = np.asarray(ts_ns, dtype=np.int64)
    eids = np.asarray(eids, dtype=object)
    keys = np.asarray(keys, dtype=object)
    n = ts.shape[0]
    if not all(isinstance(k, str) for k in keys.tolist()):  # keys as text, as group() reads them
        keys = pd.Series(keys, dtype=object).astype(str).to_numpy(dtype=object)
    by_rank = np.lexsort((pd.factorize(eids, sort=True)[0], -ts)) if n else np.zeros(0, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[by_rank] = np.arange(n)
    if distinct_keys or n == 0:
        ar = np.arange(n)
        return ChunkGroups(ar, ar, np.arange(n + 1), eids.copy(), keys.copy(), ts.copy(), ts.copy(), rank, by_rank)
    ids = group(keys, ts.astype("datetime64[ns]"), eids, rule)
    code, uniq = pd.factorize(ids)
    order = np.argsort(code, kind="stable")
    counts = np.bincount(code, minlength=len(uniq))
    starts = np.concatenate([[0], np.cumsum(counts)])
    t = ts[order]
    return ChunkGroups(code, order, starts, np.asarray(uniq, dtype=object), keys[order[starts[:-1]]],
                       np.minimum.reduceat(t, starts[:-1]), np.maximum.reduceat(t, starts[:-1]), rank, by_rank)
