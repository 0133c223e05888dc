"""An event-query's incident rule, read from the query itself (M 3.3).

An event-query fires once per window of its own while its condition lasts, so which
detections form one incident follows from that window: consecutive windows of one key,
each ``slide`` after the last, are one incident, whatever the window's length (five
minutes, an hour, a day). The window is the event-query's window operator nearest its
sink in the operator graph the provenance wrappers record
(:class:`ananke.graph.OperatorGraph`, the same graph that gives U, A 4): its ``size``
becomes the rule's window, its ``slide`` (its size when tumbling) the silence allowed
between two windows of one incident, and its grouping keys the incident's key, when the
events still carry them. Two windows of one key are then linked when their ends are at
most ``size + slide`` apart (:class:`similarity.incidents.IncidentRule`): consecutive
and overlapping windows always, and across one quiet window.

An event-query with no window operator (a per-row condition) has no cadence to read;
declare its rule with ``engine.incidents.configure(event, keys=..., window=...)``, the
spacing of its detections, or the incident store's default (five minutes) applies.

>>> from ananke.graph import OperatorGraph
>>> g = OperatorGraph()
>>> s = g.add("source", "load")
>>> w = g.add("window", "window", [(s, timedelta(hours=1))], size=timedelta(hours=1),
...           slide=timedelta(hours=1), keys=("key",))
>>> f = g.add("filter", "filter", [(w, timedelta(0))])
>>> k = g.add("sink", "hot", [(f, timedelta(0))])
>>> r = rule_from_graph(g, "hot", columns=("key", "avg_value", "eid", "ts"), eid="eid")
>>> r.keys, r.window, r.gap
(('key',), datetime.timedelta(seconds=3600), datetime.timedelta(seconds=3600))
>>> rule_from_graph(g, "hot", columns=("avg_value", "eid", "ts", "host"), eid="eid", text_columns=("eid", "host")).keys
('host',)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from ananke.graph import OperatorGraph
from archive.types import ColumnType
from similarity.incidents import IncidentRule


def sink_window(graph: OperatorGraph, sink: str) -> tuple[timedelta, timedelta, tuple[str, ...] | None] | None:
    """``(size, slide, keys)`` of the window operator nearest ``sink`` (the largest
    size and slide when several are equally near, as after a join of two windowed
    streams; ``keys`` None when the graph did not record them), or None when no window
    feeds the sink."""
    nodes = {n.id: n for n in graph.nodes}
    into: dict[int, list[int]] = {}
    for e in graph.edges:
        into.setdefault(e.dst, []).append(e.src)
    level = [n.id for n in graph.nodes if n.kind == "sink" and n.name == sink]
    seen: set[int] = set(level)
    while level:
        windows = [dict(nodes[i].params) for i in level if nodes[i].kind == "window"]
        if windows:
            size = max(w["size"] for w in windows)
            slide = max(w.get("slide", w["size"]) for w in windows)
            keys = [tuple(w["keys"]) for w in windows if w.get("keys") is not None]
            return size, slide, (keys[0] if len(set(keys)) == 1 and len(keys) == len(windows) else None)
        level = [s for i in level for s in into.get(i, []) if s not in seen]
        seen.update(level)
    return None


def rule_from_graph(graph: OperatorGraph, sink: str, columns: Iterable[str], eid: str, ts: str = "ts",
                    text_columns: Iterable[str] | None = None) -> IncidentRule | None:
    """The incident rule of the event-query whose sink is ``sink`` (see the module
    docstring), or None when no window feeds it. ``columns`` are the event stream's
    columns: the window's keys the events still carry are the incident's key; when they
    carry none of them, the events' text columns (``text_columns``, else every column)
    other than ``eid`` and ``ts`` are."""
    found = sink_window(graph, sink)
    if found is None:
        return None
    size, slide, keys = found
    columns = tuple(columns)
    kept = tuple(k for k in (keys or ()) if k in columns)
    if keys is not None and len(kept) == len(keys):
        return IncidentRule(kept, size, slide)
    text = tuple(text_columns) if text_columns is not None else columns
    return IncidentRule(tuple(sorted(c for c in text if c not in (eid, ts))), size, slide)


def rule_row(rule: IncidentRule) -> Mapping[str, object]:
    """A rule as the incident store persists it (so a read-only console in another
    process shows the same durations)."""
    return {"keys": list(rule.keys), "window_s": rule.window.total_seconds(),
            "gap_s": None if rule.gap is None else rule.gap.total_seconds()}


def follow_window(store: Any, archiver: Any, flow: Any) -> IncidentRule | None:
    """Make the incident store group a just-deployed event-query's events by its own
    window (``store.follow``), read from the flow's operator graph and its event
    stream's columns; returns the rule, or None when the query has no window (the
    store's configuration or default then applies)."""
    spec = archiver.stream(flow.stream)
    q = flow.query
    text = [c for c, t in spec.columns.items() if t is ColumnType.TEXT]
    rule = rule_from_graph(flow.pq.graph, q.name, [*spec.columns, q.ts], q.eid, q.ts, text)
    if rule is not None:
        store.follow(q.name, rule)
    return rule
