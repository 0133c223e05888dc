"""Materializing the history of intermediate streams (M 4.2-4.3, DESIGN.md §4 flow 5).

The event- and context-query functions run, unchanged, in Spark batch mode over
archived raw chunks. A chunk is read with an overlap of the query's U before its start
(A 4: no window state older than U can reach an output inside the chunk), and only
outputs inside the chunk are kept, so chunk boundaries lose no events.

Two users:

- :class:`ReplicaOperator`: when an event-query is deployed, a *materialization* task
  (the scheduler's low priority, M 4.4) walks the present and recent raw chunks newest
  first, one chunk per quantum (M 4.2, "replica1").
- :func:`rematerialize`: ``moirae rematerialize`` re-processes any range of raw chunks
  in batch, with a progress bar; idempotent and resumable (archive/materialized.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from ananke.query import ProvQuery
from archive.abc import Tier
from archive.materialized import materialized_chunks, replace_materialization
from archive.spark_sink import to_spark
from moirae.context import compute_context
from moirae.hybrid import EventQuery, QueryDefinitionError, context_stream, event_stream
from recall.api import EndReason, Interval, Output, TaskSpec

ONE_US = timedelta(microseconds=1)


def tag_of(query: str) -> str:
    return f"ev:{query}"


def detect(engine, query: EventQuery, start: datetime, end: datetime, overlap: timedelta) -> pd.DataFrame:
    """The events ``query`` detects over archived raw data, with ``start <= ts < end``."""
    pq = ProvQuery(enabled=False)
    inputs = []
    for name in query.inputs:
        src = engine._sources[name]
        spec = engine.archiver.stream(name)
        frame = engine.archiver.read(name, start - overlap, end - ONE_US)
        inputs.append(pq.source(to_spark(engine.spark, frame, spec), name, src.ts, cols=src.payload))
    out = query.fn(*inputs)
    events = out.df.select(*out.columns).toArrow().to_pandas()
    if len(events):
        events[query.ts] = pd.to_datetime(events[query.ts], utc=True)
        events = events[(events[query.ts] >= start) & (events[query.ts] < end)].reset_index(drop=True)
    return events


@dataclass
class ChunkResult:
    chunk_id: int
    events: int
    context_rows: int
    seconds: float


def materialize_chunk(engine, name: str, chunk_id: int) -> ChunkResult:
    """Re-compute one chunk of event-query ``name``'s events and contexts from raw data
    and replace their materialization."""
    return materialize_range(engine, name, [chunk_id])[0]


def materialize_range(engine, name: str, chunk_ids: list[int]) -> list[ChunkResult]:
    """The same for several chunks in one Spark job (one read, one overlap of U before the
    oldest), then written back chunk by chunk, each atomically."""
    t0 = time.perf_counter()
    deploy = engine.deploy
    query = deploy.event_queries[name]
    flow = deploy.flows[name]
    grid = engine.archiver.grid
    start, end = grid.bounds(min(chunk_ids))[0], grid.bounds(max(chunk_ids))[1]
    events = detect(engine, query, start, end, flow.U)
    ev_spec = engine.archiver.stream(flow.stream)
    contexts = []
    for cq in deploy.contexts.get(name, []):
        cx, schema = compute_context(engine.spark, engine.archiver, cq, events, ev_spec, query.eid, query.ts)
        stream = context_stream(name, cq.name)
        contexts.append((cq, stream, cx))
    deploy.on_materialized(name, events, {cq: cx for cq, _stream, cx in contexts})
    ev_chunk = _chunk_of(events, query.ts, grid)
    out = []
    for cid in sorted(chunk_ids, reverse=True):
        mine = events[ev_chunk == cid] if len(events) else events
        n_events = replace_materialization(engine.archiver, flow.stream, cid, mine, query.eid,
                                           [(s, cid) for s in query.inputs], tag_of(name))
        n_ctx = 0
        for _cq, stream, cx in contexts:
            part = cx[_chunk_of(cx, query.ts, grid) == cid] if len(cx) else cx
            n_ctx += replace_materialization(engine.archiver, stream, cid, part, None, [], tag_of(name))
        out.append(ChunkResult(cid, n_events, n_ctx, 0.0))
    per = (time.perf_counter() - t0) / max(1, len(out))
    return [ChunkResult(r.chunk_id, r.events, r.context_rows, per) for r in out]


def _chunk_of(frame: pd.DataFrame, ts: str, grid):
    us = frame[ts].astype("datetime64[us, UTC]").astype("int64").to_numpy()
    return us // grid.span_us


def raw_chunks(engine, name: str, since: datetime | None = None, until: datetime | None = None,
               tiers: tuple[Tier, ...] | None = None) -> list[int]:
    """Chunk ids of the query's raw inputs in ``[since, until)``, newest first."""
    query = engine.deploy.event_queries[name]
    ids: set[int] = set()
    for s in query.inputs:
        for c in engine.archiver.chunks(s):
            if (since is None or c.end > since) and (until is None or c.start < until) and \
                    (tiers is None or c.tier in tiers):
                ids.add(c.chunk_id)
    return sorted(ids, reverse=True)


def rematerialize(engine, name: str, since: datetime | None = None, until: datetime | None = None,
                  resume: bool = False, on_chunk: Callable[[ChunkResult, int, int], None] | None = None,
                  batch: int = 1) -> list[ChunkResult]:
    """Re-process raw chunks into ``name``'s event and context streams, newest first.

    Each chunk is replaced atomically; ``resume`` skips chunks already materialized.
    ``batch`` consecutive chunks share one Spark job (fewer, larger jobs for long
    ranges). ``on_chunk(result, done, total)`` reports progress.
    """
    if name not in engine.deploy.event_queries:
        raise QueryDefinitionError(f"unknown event-query {name!r} (deployed: {sorted(engine.deploy.event_queries)})")
    query = engine.deploy.event_queries[name]
    for s in query.inputs:
        engine.archiver.stream(s)  # UnknownStream names it
    todo = raw_chunks(engine, name, since, until)
    if resume:
        done = set.intersection(*(materialized_chunks(engine.archiver, s, tag_of(name)) for s in query.inputs))
        todo = [c for c in todo if c not in done]
    out: list[ChunkResult] = []
    for group in _runs(todo, batch):
        for res in materialize_range(engine, name, group):
            out.append(res)
            if on_chunk is not None:
                on_chunk(res, len(out), len(todo))
    return out


def _runs(chunk_ids: list[int], batch: int) -> list[list[int]]:
    """Consecutive chunk ids (newest first) in groups of at most ``batch``."""
    groups: list[list[int]] = []
    for cid in chunk_ids:
        if groups and len(groups[-1]) < batch and groups[-1][-1] == cid + 1:
            groups[-1].append(cid)
        else:
            groups.append([cid])
    return groups


@dataclass
class _ReplicaState:
    spec: TaskSpec
    chunks: list[int] = field(default_factory=list)


class ReplicaOperator:
    """A materialization task per deployed event-query (M 4.2, fig. 8 "replica1"): one
    quantum re-processes one raw chunk, newest first, over the present and recent
    tiers, at the scheduler's low priority."""

    def __init__(self, engine, name: str) -> None:
        self.engine = engine
        self.event = name
        self.name = f"replica_{name}"
        query = engine.deploy.event_queries[name]
        self.query = engine.archiver.prepare(f"SELECT count(*) AS n FROM {query.inputs[0]}")

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        chunks = raw_chunks(self.engine, self.event, tiers=(Tier.PRESENT, Tier.RECENT))
        bound = self.engine.archiver.grid.bounds(chunks[-1])[0] if chunks else event["ts"]
        return TaskSpec(operator=self.name, eid=str(event["eid"]), event_ts=event["ts"], query=self.query,
                        params={}, bound=bound, tickets=self.engine.settings.recall.default_tickets,
                        materialization=True)

    def start(self, spec: TaskSpec) -> _ReplicaState:
        return _ReplicaState(spec)

    def on_chunk(self, state: _ReplicaState, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        inputs = self.engine.deploy.event_queries[self.event].inputs
        tag = tag_of(self.event)
        done = all(chunk_id in materialized_chunks(self.engine.archiver, s, tag) for s in inputs)
        if done and any(c.chunk_id == chunk_id and c.tier is not Tier.PRESENT
                        for c in self.engine.archiver.chunks(inputs[0])):
            return []  # a sealed chunk materialized before (e.g. by an earlier run)
        materialize_chunk(self.engine, self.event, chunk_id)
        state.chunks.append(chunk_id)
        return []

    def on_end(self, state: _ReplicaState, reason: EndReason) -> list[Output]:
        return []


def replica_event(name: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"eid": f"materialize:{name}:{now.strftime('%Y%m%dT%H%M%S')}", "ts": now}


__all__ = ["ReplicaOperator", "detect", "event_stream", "materialize_chunk", "rematerialize", "replica_event"]
