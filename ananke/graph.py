"""The operator graph of instrumented queries and the static bound U (A 4, Theorem 4.1).

Every wrapper records a node; every input of a node records an edge weighted by the most
event time an input tuple may lie *before* the output tuple it contributes to: the window
size for an Aggregate (Lemma 4.1), the join's time bound on that side for a Join, zero for
stateless operators. ``U_K`` is the heaviest source-to-K path (Corollary 4.1) and
``U = max_K U_K`` (Remark 4.1).

>>> g = OperatorGraph()
>>> s = g.add("source", "cars")
>>> a1 = g.add("window", "A1", [(s, timedelta(minutes=2))], size=timedelta(minutes=2))
>>> a2 = g.add("window", "A2", [(a1, timedelta(seconds=30))], size=timedelta(seconds=30))
>>> k = g.add("sink", "K", [(a2, timedelta(0))])
>>> g.u_k("K")
datetime.timedelta(seconds=150)
>>> g.U
datetime.timedelta(seconds=150)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from typing import Any

from ananke.errors import GraphError, UnknownSink

KINDS = ("source", "filter", "map", "window", "join", "sink")


@dataclass(frozen=True)
class OpNode:
    """One operator: its kind, a display name and its static parameters."""

    id: int
    kind: str
    name: str
    params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class OpEdge:
    """``src`` feeds ``dst``; an input tuple is at most ``lag`` older than the output."""

    src: int
    dst: int
    lag: timedelta


@dataclass
class OperatorGraph:
    """A DAG of operators, built node by node by the provenance wrappers."""

    nodes: list[OpNode] = field(default_factory=list)
    edges: list[OpEdge] = field(default_factory=list)

    def add(self, kind: str, name: str, inputs: Iterable[tuple[int, timedelta]] = (), **params: Any) -> int:
        """Add a node fed by ``inputs`` (pairs of node id and lag); return its id."""
        if kind not in KINDS:
            raise GraphError(f"unknown operator kind {kind!r}; expected one of {KINDS}")
        if kind == "sink" and name in self.sinks:
            raise GraphError(f"sink {name!r} is already defined")
        node_id = len(self.nodes)
        inputs = list(inputs)
        if kind != "source" and not inputs:
            raise GraphError(f"{kind} {name!r} needs at least one input")
        for src, lag in inputs:
            if not 0 <= src < node_id:
                raise GraphError(f"{kind} {name!r}: input node {src} does not exist")
            if lag < timedelta(0):
                raise GraphError(f"{kind} {name!r}: negative lag {lag}")
        self.nodes.append(OpNode(node_id, kind, name, tuple(sorted(params.items()))))
        self.edges.extend(OpEdge(src, node_id, lag) for src, lag in inputs)
        return node_id

    @property
    def sinks(self) -> list[str]:
        return [n.name for n in self.nodes if n.kind == "sink"]

    @property
    def sources(self) -> list[str]:
        return [n.name for n in self.nodes if n.kind == "source"]

    def u_k(self, sink: str) -> timedelta:
        """U_K: the heaviest path from any source to sink ``sink`` (Theorem 4.1)."""
        for n in self.nodes:
            if n.kind == "sink" and n.name == sink:
                return self._longest_to(n.id)
        raise UnknownSink(f"no sink named {sink!r}; sinks are {self.sinks}")

    def hold_k(self, sink: str) -> timedelta:
        """How far below the watermark Spark ran its previous batch with a tuple of sink
        ``sink`` may still be emitted: the largest ``hold`` of an operator upstream of it
        (zero for windows and joins, which emit at or after that watermark; a row pattern
        holds its matches up to its WITHIN, :meth:`ananke.query.Provenanced.stateful`).
        The sink's watermark (A Def. 2.1) is that watermark minus the hold."""
        for n in self.nodes:
            if n.kind == "sink" and n.name == sink:
                seen, todo, hold = set(), [n.id], timedelta(0)
                while todo:
                    i = todo.pop()
                    if i in seen:
                        continue
                    seen.add(i)
                    hold = max(hold, dict(self.nodes[i].params).get("hold", timedelta(0)))
                    todo.extend(e.src for e in self.edges if e.dst == i)
                return hold
        raise UnknownSink(f"no sink named {sink!r}; sinks are {self.sinks}")

    @property
    def U(self) -> timedelta:  # noqa: N802 - the paper's name
        """U = max over sinks of U_K (Remark 4.1); zero when there is no sink."""
        return max((self.u_k(s) for s in self.sinks), default=timedelta(0))

    def u_values(self) -> dict[str, timedelta]:
        """U_K for every sink."""
        return {s: self.u_k(s) for s in self.sinks}

    def _longest_to(self, node_id: int) -> timedelta:
        incoming: dict[int, list[OpEdge]] = {}
        for e in self.edges:
            incoming.setdefault(e.dst, []).append(e)

        @cache
        def longest(n: int) -> timedelta:
            return max((e.lag + longest(e.src) for e in incoming.get(n, [])), default=timedelta(0))

        return longest(node_id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view: nodes, edges (with lags in seconds) and U per sink."""
        return {
            "nodes": [{"id": n.id, "kind": n.kind, "name": n.name,
                       "params": {k: (v.total_seconds() if isinstance(v, timedelta) else v) for k, v in n.params}}
                      for n in self.nodes],
            "edges": [{"src": e.src, "dst": e.dst, "lag_s": e.lag.total_seconds()} for e in self.edges],
            "U_K_s": {s: u.total_seconds() for s, u in self.u_values().items()},
            "U_s": self.U.total_seconds(),
        }
