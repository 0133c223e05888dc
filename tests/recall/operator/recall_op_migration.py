"""The paper's task-migration scenario (M 4.6, fig. 10), shared by the operator-level and
the end-to-end tests.

An overload on node n0 is detected; the lightly loaded nodes at that moment are n1 and
n2. A Recall operator looks up the historical CPU use of every process on those nodes;
an aggregate keeps each node's worst process, a filter keeps nodes whose processes are
all historically light, a join adds the node's ping time and a last filter keeps nodes
with a low ping. Process p1 on n1 had a spike in the newest chunk, so n1 first looks
heavy and is revised to light as older history arrives. Meanwhile n1's network
degrades (ping 5 ms before the event, 80 ms after): with *event analysis* n1 ends up a
candidate (its ping when the overload happened was fine), with *present analysis* it
does not (its ping now is bad) (M fig. 12).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pandas as pd

from recall.api import Output
from recall.operator import Recall
from recall.revision_ops import Chain, ResultTable, RevisionAggregate, RevisionFilter, RevisionJoin

T0 = datetime(2026, 3, 2, tzinfo=UTC)
DAY = timedelta(days=1)
EVENT_TS = T0 + 4 * DAY + DAY / 2  # day 4, noon
HEAVY = 50.0
RECALL_SQL = ("SELECT h.node, h.pid, avg(h.cpu) AS avg_cpu FROM procs h "
              "WHERE h.node = ANY(:nodes) GROUP BY h.node, h.pid")
PINGS_BEFORE = [{"node": "n1", "ts": EVENT_TS - timedelta(minutes=1), "ping": 5.0},
                {"node": "n2", "ts": EVENT_TS - timedelta(minutes=2), "ping": 10.0}]
PINGS_AFTER = [{"node": "n1", "ts": EVENT_TS + timedelta(minutes=1), "ping": 80.0},
               {"node": "n2", "ts": EVENT_TS + timedelta(minutes=1), "ping": 12.0}]
EXPECTED = {"event": {"n1": 5.0, "n2": 10.0}, "present": {"n2": 12.0}}


def procs_history() -> pd.DataFrame:
    """Five daily chunks (days 0-4) of per-process CPU samples, all before the event."""
    rows = []
    for d in range(5):
        for i in range(4):
            ts = T0 + d * DAY + timedelta(hours=2 * i + 1)
            rows.append((ts, "n1", "p1", 95.0 if d == 4 else 10.0))  # a recent spike only
            rows.append((ts, "n2", "p2", 20.0))
            rows.append((ts, "n2", "p3", 30.0))
            rows.append((ts, "n3", "p4", 99.0))  # not a candidate node: never recalled
    return pd.DataFrame(rows, columns=["ts", "node", "pid", "cpu"])


def load_stream() -> pd.DataFrame:
    """Node load samples around the event; n0 overloads at EVENT_TS."""
    rows = [(EVENT_TS - timedelta(seconds=30), n, v) for n, v in (("n0", 0.5), ("n1", 0.1), ("n2", 0.2),
                                                                  ("n3", 0.7))]
    rows += [(EVENT_TS, "n0", 0.97), (EVENT_TS, "n1", 0.15), (EVENT_TS, "n2", 0.25), (EVENT_TS, "n3", 0.8)]
    return pd.DataFrame(rows, columns=["ts", "node", "load"])


def event(nodes=("n1", "n2")) -> dict:
    return {"eid": "overload-n0", "ts": EVENT_TS, "node": "n0", "nodes": list(nodes)}


def recall_operator(store=None) -> Recall:
    return Recall("proc_history", RECALL_SQL, store=store, event_attrs=("node", "nodes"))


class Pipeline:
    """Recall -> aggregate (worst process per node) -> filter (light) -> join (ping) ->
    filter (low ping), as in M fig. 10. Thread-safe: the manager calls ``on_output``
    from its workers while pings arrive from elsewhere."""

    def __init__(self, analysis: str) -> None:
        self.worst = RevisionAggregate("worst", ("node",), {"worst": ("max", "avg_cpu")})
        self.light = RevisionFilter("light", lambda r: r["worst"] < HEAVY)
        self.ping = RevisionJoin("ping", "node", analysis=analysis)
        self.near = RevisionFilter("near", lambda r: r["ping"] < 20.0)
        self.chain = Chain(self.worst, self.light, self.ping, self.near)
        self.candidates = ResultTable()
        self.recalled = ResultTable()
        self.history: list[Output] = []  # every recall output, in order
        self._lock = threading.RLock()

    def on_output(self, out: Output) -> None:
        with self._lock:
            self.history.append(out)
            self.recalled.apply(out)
            self._apply(self.chain.on_output(out))

    def on_ping(self, row: dict) -> None:
        with self._lock:
            self._apply(self.chain.on_other("ping", row))

    def _apply(self, outs: list[Output]) -> None:
        for c in outs:
            self.candidates.apply(c)

    def final(self, eid: str = "overload-n0") -> dict[str, float]:
        with self._lock:
            return {r["node"]: r["ping"] for r in self.candidates.rows(eid).values()}

    def avg_cpu_history(self, key: str) -> list[tuple[str, float]]:
        with self._lock:
            return [(o.kind.value, o.row["avg_cpu"]) for o in self.history if o.key == key]
