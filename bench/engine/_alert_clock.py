"""Alert latency as a user sees it, for ``bench/engine/engine_e2e.py``.

The clock of an event starts when its window closes under the watermark: the earliest
instant Spark could emit it. A window ending at ``end`` closes once a row with event time
``end + lateness`` exists; the scenario source delivers scenario time ``X`` at wall time
``wall0 + (X - t0) / speedup``. That line is read from the event-query's own progress:
each batch reports its wall start ``W_i`` and the scenario time ``t_i`` its source had
reached, a little after ``W_i``; so ``W_i + (X - t_i) / speedup`` is a lower bound of
``wall(X)``, and the largest over all batches is used. A clock started early only makes
the latency longer: the figure is conservative.

The clock stops when the HTTP API (``GET /api/events``, ``GET /api/events/{eid}``,
polled every ``poll_s``) shows, in turn: (a) the event, (b) its context, (c) its first
output of the Recall ``recall``, (d) its first similar past incident.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
import urllib.request
from datetime import datetime, timedelta

STAGES = ("event", "context", "recall", "similar")


def progress_t(progress: dict) -> int | None:
    """The scenario time (ns, the source offset's ``t``) a Spark progress report's batch
    reached, or None for a report without one."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    off = sources[0].get("endOffset")
    if isinstance(off, str):
        off = json.loads(off)
    t = (off or {}).get("t") if isinstance(off, dict) else None
    return int(t) if t is not None else None


def window_close_wall(pairs: list[tuple[float, int]], ts_iso: str, lateness: timedelta,
                      speedup: float) -> float | None:
    """The wall time (epoch s) at which the window of an event at ``ts_iso`` (its window's
    end less 1 µs) closed under the watermark, from (batch wall start, scenario ns reached)
    pairs: the tightest of their lower bounds.

    >>> from datetime import UTC, datetime
    >>> t = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp() * 1e9)
    >>> window_close_wall([(1000.0, t), (1001.0, t + 250 * 10**9)], "2024-12-31T23:59:59.999999+00:00",
    ...                   timedelta(minutes=1), 300.0)
    1000.366667
    """
    if not pairs:
        return None
    end = datetime.fromisoformat(ts_iso.replace("Z", "+00:00")) + timedelta(microseconds=1)
    x_ns = (end + lateness).timestamp() * 1e9
    return round(max(w + (x_ns - t) / 1e9 / speedup for w, t in pairs), 6)


def tick_wait(starts: list[float], close: float) -> float | None:
    """Seconds from ``close`` to the first micro-batch start at or after it (``starts``
    sorted, epoch s); None if no batch started after it.

    >>> tick_wait([10.0, 11.0, 12.0], 10.25)
    0.75
    >>> tick_wait([10.0, 11.0], 11.0), tick_wait([10.0, 11.0], 11.5)
    (0.0, None)
    """
    i = bisect.bisect_left(starts, close)
    return round(starts[i] - close, 3) if i < len(starts) else None


def observe(rec: dict, detail: dict, now: float, recall: str) -> None:
    """Stamp ``now`` on each stage that ``detail`` (``GET /api/events/{eid}``) shows for
    the first time.

    >>> rec = {"event": 1.0}
    >>> observe(rec, {"similar": [{"eid": "x"}], "results": {"norm": {"current": None}}}, 2.0, "norm")
    >>> observe(rec, {"similar": [{"eid": "x"}], "results": {"norm": {"current": {"n": 3}}}}, 3.0, "norm")
    >>> rec
    {'event': 1.0, 'similar': 2.0, 'recall': 3.0}
    """
    if detail.get("context") and "context" not in rec:
        rec["context"] = now
    if (detail.get("results", {}).get(recall) or {}).get("current") and "recall" not in rec:
        rec["recall"] = now
    if detail.get("similar") and "similar" not in rec:
        rec["similar"] = now


def pending(rec: dict, now: float, give_up_s: float) -> bool:
    """Whether an event still has a stage the API has not shown, within ``give_up_s`` of
    its first sighting. Every stage counts: the similar incidents can show before the
    Recall's first output, and an event polled no longer once they did would lose its
    Recall time.

    >>> pending({"event": 0.0, "context": 1.0, "similar": 1.0}, 2.0, 120.0)
    True
    >>> pending({"event": 0.0, "context": 1.0, "similar": 1.0, "recall": 1.5}, 2.0, 120.0)
    False
    >>> pending({"event": 0.0}, 121.0, 120.0)
    False
    """
    return not all(s in rec for s in STAGES) and now - rec["event"] <= give_up_s


class AlertClock:
    def __init__(self, base_url: str, flow_query, speedup: float, lateness: timedelta, since: str,
                 event: str = "overload", recall: str = "norm", poll_s: float = 0.1, give_up_s: float = 120.0) -> None:
        self.since = urllib.request.quote(since, safe="")
        self.base, self.query, self.speedup, self.lateness = base_url.rstrip("/"), flow_query, speedup, lateness
        self.event, self.recall, self.poll_s, self.give_up_s = event, recall, poll_s, give_up_s
        self.pairs: dict[int, tuple[float, int]] = {}  # batch id -> (wall start, scenario ns reached)
        self.seen: dict[str, dict] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="alert-clock", daemon=True)
        self._t.start()

    def _get(self, path: str):
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return json.loads(r.read())

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:  # a slow or refused request: count it, poll again
                self.errors += 1
            self._stop.wait(self.poll_s)

    def _tick(self) -> None:
        p = self.query.lastProgress
        if p and progress_t(p) is not None:
            wall = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
            self.pairs[int(p["batchId"])] = (wall, progress_t(p))
        now = time.time()
        for ev in self._get(f"/api/events?type={self.event}&since={self.since}&limit=200")["events"]:
            self.seen.setdefault(ev["eid"], {"ts": ev["ts"], "event": now})
        for eid, rec in self.seen.items():
            if not pending(rec, now, self.give_up_s):
                continue
            observe(rec, self._get(f"/api/events/{urllib.request.quote(eid, safe='')}"), time.time(), self.recall)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)

    def close_wall(self, ts_iso: str) -> float | None:
        """Wall time (epoch s) at which the window of the event at ``ts_iso`` closed."""
        return window_close_wall(list(self.pairs.values()), ts_iso, self.lateness, self.speedup)

    def tick_waits(self, closed_after: float | None = None) -> list[float]:
        """Per event, the seconds from its window's close to the next micro-batch start of
        the event-query: the wait for the trigger's tick, which no engine work shortens.
        It depends only on where in the trigger interval the window closes."""
        starts = sorted(w for w, _ in self.pairs.values())
        out = []
        for rec in self.seen.values():
            close = self.close_wall(rec["ts"])
            if close is None or (closed_after is not None and close < closed_after):
                continue
            wait = tick_wait(starts, close)
            if wait is not None:
                out.append(wait)
        return out

    def latencies(self, closed_after: float | None = None) -> dict[str, list[float]]:
        """Per stage, the seconds from each event's window close to the API showing it;
        only events whose window closed at or after ``closed_after`` (epoch s) if given."""
        out: dict[str, list[float]] = {s: [] for s in STAGES}
        for rec in self.seen.values():
            start = self.close_wall(rec["ts"])
            if start is None or (closed_after is not None and start < closed_after):
                continue
            for s in STAGES:
                if s in rec:
                    out[s].append(rec[s] - start)
        return out
