"""The graph stream: vertices, edges and "expired" labels (A 3, Definition 3.3).

Every item carries ``ts``, its timestamp in the provenance stream (the τ of R-V / R-E /
R-L), distinct from ``tuple_ts``, the event time of the tuple a vertex stands for.
A :class:`~ananke.abc.GraphSink` is any callable taking a batch of items; :class:`ListSink`
keeps them in memory (tests), :class:`ananke.store.GraphStore` writes them to PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ananke.ids import stable_id


@dataclass(frozen=True, slots=True)
class SinkTuple:
    """A sink tuple as ANK-1 sees it: a unique id, its event time and its payload."""

    id: int
    ts: datetime
    payload: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def of(cls, sink: str, ts: datetime, payload: Mapping[str, Any]) -> SinkTuple:
        """A sink tuple whose id is a deterministic hash of (sink, ts, payload)."""
        return cls(stable_id(sink, ts.isoformat(), dict(payload)), ts, dict(payload))


@dataclass(frozen=True, slots=True)
class SourceVertex:
    """R-V for a source tuple ``id`` (event time ``tuple_ts``), emitted at ``ts``."""

    id: int
    tuple_ts: datetime
    ts: datetime
    kind: Literal["source"] = "source"


@dataclass(frozen=True, slots=True)
class SinkVertex:
    """R-V for sink tuple ``id`` of sink ``sink``, emitted at ``ts``."""

    id: int
    sink: str
    tuple_ts: datetime
    ts: datetime
    payload: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    kind: Literal["sink"] = "sink"


@dataclass(frozen=True, slots=True)
class Edge:
    """R-E: source tuple ``source_id`` contributed to sink tuple ``sink_id``."""

    source_id: int
    sink_id: int
    ts: datetime
    kind: Literal["edge"] = "edge"


@dataclass(frozen=True, slots=True)
class Label:
    """R-L: vertex ``vertex_id`` (a ``source`` or ``sink`` vertex) is expired."""

    vertex_id: int
    vertex_kind: Literal["source", "sink"]
    ts: datetime
    kind: Literal["label"] = "label"


GraphItem = SourceVertex | SinkVertex | Edge | Label


class ListSink:
    """A GraphSink that appends every item to ``items`` (tests, benchmarks)."""

    def __init__(self) -> None:
        self.items: list[GraphItem] = []

    def __call__(self, items: Sequence[GraphItem]) -> None:
        self.items.extend(items)


def graph_key(item: GraphItem) -> tuple:
    """What identifies an item regardless of when it was emitted (ANK-1 vs ANK-N).

    >>> from ananke.ids import EPOCH
    >>> graph_key(Edge(1, 2, EPOCH))
    ('edge', 1, 2)
    """
    if isinstance(item, SourceVertex):
        return ("source", item.id, item.tuple_ts)
    if isinstance(item, SinkVertex):
        return ("sink", item.sink, item.id, item.tuple_ts)
    if isinstance(item, Edge):
        return ("edge", item.source_id, item.sink_id)
    return ("label", item.vertex_kind, item.vertex_id)
