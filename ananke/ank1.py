"""ANK-1: live forward provenance in one user-defined operator (A 5.1, Algorithm 1).

The frozen :class:`Ank1` describes the operator (the sinks and U, e.g. from a
:class:`~ananke.query.ProvQuery`); :meth:`Ank1.build` makes the runtime
:class:`Ank1Logic`, fed with ``on_tuple(sink, sink_tuple, provenance)`` and
``on_watermark(sink, wm)``: a frozen description and the runtime it builds, as Bytewax
splits ``Clock`` from ``ClockLogic``.

Per Algorithm 1, with W the operator watermark (min over sinks of W_K, the epoch until
every sink has reported one):

- ``on_tuple`` emits the sink vertex, every source vertex not emitted before (set T),
  one edge per provenance entry and the sink's "expired" label, all stamped W;
- ``on_watermark`` advances W and labels "expired", stamped W, every source in T with
  event time < W - U, dropping it from T (Remark 4.1).

T therefore holds only alive sources. The *expiry horizon* W - U is what the Archiver
demotes by (docs/ARCHITECTURE.md, "Demotion by provenance"); ``on_horizon`` is called
each time it advances.

A sink tuple older than its sink's watermark is late beyond the allowed lateness (Spark's
stateful operators would have dropped it; stateless paths let it through). Emitting it
could add an edge to an already-labelled source, so it is not fed to the graph; it is
counted in ``stats.late`` and handed to ``on_late``.

>>> from ananke.items import ListSink, SinkTuple
>>> from datetime import UTC, datetime, timedelta
>>> out = ListSink()
>>> ank = Ank1(sinks=("K",), U=timedelta(minutes=10)).build(out)
>>> t0 = datetime(2024, 1, 1, 8, 0, tzinfo=UTC)
>>> _ = ank.on_tuple("K", SinkTuple(7, t0), [(1, t0), (2, t0)])
>>> [i.kind for i in out.items]
['sink', 'source', 'edge', 'source', 'edge', 'label']
>>> ank.state_size()
2
>>> _ = ank.on_watermark("K", t0 + timedelta(minutes=11))
>>> ank.horizon() == t0 + timedelta(minutes=1), ank.state_size()
(True, 0)
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ananke.abc import GraphSink, HorizonListener, LateListener
from ananke.errors import AnankeError, UnknownSinkName
from ananke.ids import EPOCH, micros
from ananke.items import Edge, GraphItem, Label, SinkTuple, SinkVertex, SourceVertex


@dataclass(frozen=True)
class Ank1:
    """What ANK-1 needs to know statically: the instrumented sinks and U."""

    sinks: tuple[str, ...]
    U: timedelta

    def __post_init__(self) -> None:
        if not self.sinks:
            raise AnankeError("Ank1 needs at least one sink")
        if self.U < timedelta(0):
            raise AnankeError(f"Ank1: U must be >= 0, got {self.U}")

    @classmethod
    def from_query(cls, query) -> Ank1:
        """From a :class:`~ananke.query.ProvQuery`: its sinks and its U."""
        return cls(tuple(query.graph.sinks), query.U)

    def build(self, emit: GraphSink | None = None,
              on_horizon: HorizonListener | None = None,
              on_late: LateListener | None = None) -> Ank1Logic:
        return Ank1Logic(self, emit, on_horizon, on_late)


@dataclass
class Ank1Stats:
    """Counters of what ANK-1 has emitted and refused."""

    sink_tuples: int = 0
    sources: int = 0
    edges: int = 0
    labels: int = 0
    late: int = 0
    max_state: int = 0


@dataclass
class Ank1Logic:
    """The runtime of ANK-1 (Algorithm 1). Calls must not overlap: adapters feeding it from
    several threads hold ``lock``."""

    spec: Ank1
    emit: GraphSink | None = None
    on_horizon: HorizonListener | None = None
    on_late: LateListener | None = None
    stats: Ank1Stats = field(default_factory=Ank1Stats)

    def __post_init__(self) -> None:
        self._wk: dict[str, datetime] = {}
        self._w = EPOCH
        self._u_us = int(self.spec.U / timedelta(microseconds=1))
        self._alive: dict[int, int] = {}  # source id -> event time (µs): the set T
        self._heap: list[tuple[int, int]] = []  # (event time µs, id), T ordered on τ
        self._horizon: datetime | None = None
        self.lock = threading.RLock()  # held by adapters whose sinks run on several threads
        self._pending: list[GraphItem] = []  # emitted, not yet handed to ``emit``
        self._batching = 0

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Hand what the calls inside the block emit to ``emit`` in one call, at its end:
        one transaction of the graph store per micro-batch, not one per sink tuple.

        Items ``emit`` refused (it raised) stay pending and go first in the next call:
        ANK-1's state already counts their sources as emitted, so dropping them would
        leave a replayed batch's edges without their source vertices."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self.flush()

    def flush(self) -> None:
        """Hand the pending items to ``emit`` (see :meth:`batched`)."""
        if self._pending and self.emit is not None:
            items = self._pending
            self.emit(items)
            self._pending = []

    def _emit(self, items: list[GraphItem]) -> None:
        if self.emit is None:
            return
        self._pending.extend(items)
        if not self._batching:
            self.flush()

    # -- Algorithm 1, L1-11 -------------------------------------------------------
    def on_tuple(self, sink: str, sink_tuple: SinkTuple,
                 provenance: Iterable[tuple[int, datetime]]) -> list[GraphItem]:
        """Emit the sink vertex, new source vertices, edges and the sink label (stamped W).

        ``provenance`` may name a source tuple more than once (Spark's wrappers do not
        de-duplicate, see :mod:`ananke.query`): each edge is emitted once (R-E)."""
        if sink not in self.spec.sinks:
            raise UnknownSinkName(f"sink {sink!r} is not instrumented; known: {self.spec.sinks}")
        wk = self._wk.get(sink)
        if wk is not None and sink_tuple.ts < wk:
            self.stats.late += 1
            if self.on_late is not None:
                self.on_late(sink, sink_tuple)
            return []
        w = self._w
        out: list[GraphItem] = [SinkVertex(sink_tuple.id, sink, sink_tuple.ts, w, sink_tuple.payload)]
        alive, heap = self._alive, self._heap
        linked: set[int] = set()
        for sid, sts in provenance:
            if sid in linked:
                continue
            linked.add(sid)
            if sid not in alive:
                us = micros(sts)
                alive[sid] = us
                heapq.heappush(heap, (us, sid))
                out.append(SourceVertex(sid, sts, w))
                self.stats.sources += 1
            out.append(Edge(sid, sink_tuple.id, w))
            self.stats.edges += 1
        out.append(Label(sink_tuple.id, "sink", w))
        self.stats.sink_tuples += 1
        self.stats.labels += 1
        self.stats.max_state = max(self.stats.max_state, len(alive))
        self._emit(out)
        return out

    # -- Algorithm 1, L12-17 ------------------------------------------------------
    def on_watermark(self, sink: str, wm: datetime) -> list[GraphItem]:
        """Advance sink ``sink``'s watermark (never backwards) and label expired sources."""
        if sink not in self.spec.sinks:
            raise UnknownSinkName(f"sink {sink!r} is not instrumented; known: {self.spec.sinks}")
        micros(wm)  # refuses naive datetimes
        if sink in self._wk and wm <= self._wk[sink]:
            return []
        self._wk[sink] = wm
        if len(self._wk) < len(self.spec.sinks):
            return []
        w = min(self._wk.values())
        if w <= self._w:
            return []
        self._w = w
        limit = micros(w) - self._u_us
        out: list[GraphItem] = []
        heap, alive = self._heap, self._alive
        while heap and heap[0][0] < limit:
            _, sid = heapq.heappop(heap)
            del alive[sid]
            out.append(Label(sid, "source", w))
        self.stats.labels += len(out)
        if out:
            self._emit(out)
        horizon = w - self.spec.U
        if self._horizon is None or horizon > self._horizon:
            self._horizon = horizon
            if self.on_horizon is not None:
                self.on_horizon(horizon)
        return out

    # -- queries --------------------------------------------------------------------
    def watermark(self) -> datetime | None:
        """W = min over sinks of W_K, or None until every sink has reported."""
        return self._w if len(self._wk) == len(self.spec.sinks) else None

    def horizon(self) -> datetime | None:
        """The expiry horizon min_K(W_K) - U: no source tuple older than it can still
        contribute to a sink tuple (Remark 4.1). None until every sink has a watermark."""
        return self._horizon

    def state_size(self) -> int:
        """|T|: the number of alive source vertices ANK-1 remembers."""
        return len(self._alive)

    def is_alive(self, source_id: int) -> bool:
        return source_id in self._alive
