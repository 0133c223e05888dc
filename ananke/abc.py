"""Ananke's extension points: what the engine plugs into live forward provenance.

- :class:`GraphSink` receives the graph stream (vertices, edges, expired labels) in
  batches; :class:`~ananke.store.GraphStore` (PostgreSQL) and
  :class:`~ananke.items.ListSink` (memory) implement it, and ANK-1 and ANK-N write to any.
- :class:`Resolver` turns window digests into the source tuples they aggregated, read
  back from the archive (:mod:`ananke.digest`); the engine's archive-backed resolver
  implements it.
- :class:`HorizonListener` is told each time ANK-1's expiry horizon ``min_K(W_K) - U``
  advances (A 5.1, Remark 4.1); the engine demotes archive chunks behind it.
- :class:`LateListener` is told of each sink tuple that came behind its sink's watermark
  and was therefore kept out of the graph.

Each is a callable protocol, so a plain function or a bound method fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from ananke.digest import Digest, DigestSpec
from ananke.items import GraphItem, SinkTuple

__all__ = ["GraphSink", "HorizonListener", "LateListener", "Resolver"]


@runtime_checkable
class GraphSink(Protocol):
    """Takes a batch of graph items. A sink that raises leaves the batch pending: ANK-1
    hands it again, first, with its next batch, so a sink must accept items it already
    stored (keyed inserts, as :class:`~ananke.store.GraphStore` does)."""

    def __call__(self, items: Sequence[GraphItem], /) -> None: ...


@runtime_checkable
class Resolver(Protocol):
    """``resolve(spec, digests)``: for each digest, in order, the source tuples of its
    window as ``(id, event time)`` pairs."""

    def __call__(self, spec: DigestSpec, digests: Sequence[Digest], /) -> list[list[tuple[int, datetime]]]: ...


@runtime_checkable
class HorizonListener(Protocol):
    """Called with the new expiry horizon each time it advances (never backwards)."""

    def __call__(self, horizon: datetime, /) -> None: ...


@runtime_checkable
class LateListener(Protocol):
    """Called with the sink name and the sink tuple ANK-1 refused as late."""

    def __call__(self, sink: str, sink_tuple: SinkTuple, /) -> None: ...
