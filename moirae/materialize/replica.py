"""Materializing the history of intermediate streams (M 4.2-4.3; docs/ARCHITECTURE.md, 3.3).

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

Both end a unit with :func:`archive.simindex.ready` for the chunks they rewrote, so the
Similarity Recall indexes of those chunks are built in the background (M 4.2 "Moirae can
optionally index the resulting materialized views"; :mod:`recall.similarity_prebuild`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pandas as pd

from ananke.query import ProvQuery
from archive import Archiver, simindex
from archive.abc import ChunkGrid, Tier
from archive.materialized import materialized_chunks, replace_materialization, tag_sources
from archive.spark_sink import to_spark
from moirae.ingest.sources import SourceRegistry
from moirae.materialize.unit_inputs import UnitClaims, UnitLedger, unit_inputs
from moirae.queries.context import compute_context
from moirae.queries.hybrid import ContextQuery, EventQuery, QueryDefinitionError, context_stream, event_stream
from recall.api import EndReason, Interval, Output, TaskSpec

ONE_US = timedelta(microseconds=1)


def tag_of(query: str) -> str:
    return f"ev:{query}"


@dataclass
class ChunkResult:
    chunk_id: int
    events: int
    context_rows: int
    seconds: float


class DeployedQueries(Protocol):
    """The deployed hybrid queries, by event-query name (:class:`moirae.deploy.manager.DeployManager`)."""

    event_queries: Mapping[str, EventQuery]
    flows: Mapping[str, Any]  # the live EventFlow of each (its ``stream``, ``U``, ``emitted_below``)
    contexts: Mapping[str, list[ContextQuery]]


class FlaggedReads:
    """The archive as a re-run's contexts read it: every plain read (a Spark
    context-query's inputs) through ``flags`` (removed rows out, corrected ones with
    their new values: :meth:`moirae.retract.flagged.ArchiveFlags.rows`), and a SQL
    context-query through the same flags inside its query (``row_flags``,
    :mod:`archive.row_flags`). Everything else is the archive's own."""

    def __init__(self, archiver: Archiver, flags) -> None:
        self._archiver = archiver
        self.row_flags = flags

    def read(self, stream: str, start: datetime, end: datetime, with_ids: bool = False) -> pd.DataFrame:
        frame = self._archiver.read(stream, start, end, with_ids=True)
        if with_ids:
            return frame
        return self.row_flags.rows(stream, frame, self._archiver.stream(stream).ts_col)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._archiver, name)


class Materializer:
    """Materialization of the deployed event-queries' histories (see the module doc)."""

    def __init__(self, archiver: Archiver, spark: Callable[[], Any], sources: SourceRegistry,
                 deployed: DeployedQueries, units: UnitLedger,
                 on_materialized: Callable[[str, pd.DataFrame, dict], None]) -> None:
        self.archiver = archiver
        self.spark = spark
        self.sources = sources
        self.deployed = deployed
        self.units = units
        self.on_materialized = on_materialized
        self.claims = UnitClaims()  # units being materialized now (replica1, replica2)
        #: the active retractions (moirae.retract.flagged.ArchiveFlags, set by the engine): a
        #: re-run never reads a retracted row nor writes back a retracted alert
        self.flags = None

    def detect(self, query: EventQuery, start: datetime, end: datetime, overlap: timedelta,
               after: timedelta = timedelta(0)) -> pd.DataFrame:
        """The events ``query`` detects over archived raw data, with ``start <= ts < end``.
        ``after``: how much data past an event decides it (a row pattern's hold, its
        WITHIN: a match's end waits for the key's next row or its deadline); the data is
        read that far past ``end``, and an event less than ``after`` before the newest
        row read is left to the live query (batch mode would end its match early)."""
        pq = ProvQuery(enabled=False)
        inputs = []
        newest = None
        for name in query.inputs:
            src = self.sources.by_name[name]
            spec = self.archiver.stream(name)
            frame = self.archiver.read(name, start - overlap, end + after - ONE_US, with_ids=self.flags is not None)
            if self.flags is not None:
                frame = self.flags.rows(name, frame, spec.ts_col)
            if after and len(frame):
                top = pd.Timestamp(frame[spec.ts_col].max())
                newest = top if newest is None else max(newest, top)
            inputs.append(pq.source(to_spark(self.spark(), frame, spec), name, src.ts, cols=src.payload))
        out = query.fn(*inputs)
        events = out.df.select(*out.columns).toArrow().to_pandas()
        if len(events):
            events[query.ts] = pd.to_datetime(events[query.ts], utc=True)
            events = events[(events[query.ts] >= start) & (events[query.ts] < end)].reset_index(drop=True)
            if after and newest is not None:
                newest = newest.tz_localize("UTC") if newest.tzinfo is None else newest
                events = events[events[query.ts] < newest - after].reset_index(drop=True)
        if self.flags is not None:
            events = self.flags.events(events, query.eid)
        return events

    def unit_grid(self, name: str) -> ChunkGrid:
        """The grid materialization of event-query ``name`` works on: the coarsest chunk
        interval among its raw inputs and the streams it writes (events, contexts). Streams
        keep their own intervals (archive/chunks.py); the ladder's steps nest, so every
        input and output chunk lies wholly inside one unit, and a unit is replaced output
        chunk by output chunk with no row of a neighbour touched."""
        return self.archiver.grid_for(self._streams(name))

    def _streams(self, name: str) -> list[str]:
        d = self.deployed
        written = [d.flows[name].stream, *(context_stream(name, cq.name) for cq in d.contexts.get(name, []))]
        return [*d.event_queries[name].inputs, *written]

    def unit_inputs(self, name: str, units: list[int], grid: ChunkGrid) -> dict[int, tuple]:
        """What each of ``units`` is computed from (:func:`moirae.materialize.unit_inputs.unit_inputs`)."""
        d = self.deployed
        return unit_inputs(self.archiver, d.event_queries[name], d.flows[name].U, d.contexts.get(name, []),
                           units, grid)

    def materialize_chunk(self, name: str, unit_id: int) -> ChunkResult:
        """Re-compute one unit (:meth:`unit_grid`) of event-query ``name``'s events and
        contexts from raw data and replace their materialization."""
        return self.materialize_range(name, [unit_id])[0]

    def materialize_range(self, name: str, unit_ids: list[int]) -> list[ChunkResult]:
        """The same for several units in one Spark job (one read, one overlap of U before the
        oldest), then written back output chunk by output chunk, each atomically; the raw
        input chunks of a unit are tagged done only after all its output chunks (so an
        interrupted run is redone by ``resume``, never skipped)."""
        t0 = time.perf_counter()
        arch, query, flow = self.archiver, self.deployed.event_queries[name], self.deployed.flows[name]
        grid = self.unit_grid(name)
        start, end = grid.bounds(min(unit_ids))[0], grid.bounds(max(unit_ids))[1]
        read_from = self.unit_inputs(name, unit_ids, grid)  # before the reads: a row arriving later is news
        events = self.detect(query, start, end, flow.U, flow.sink.hold)
        frontier = self.live_frontier(name)
        if frontier is not None and len(events):  # the live query's to emit, whole (see live_frontier)
            events = events[events[query.ts] < frontier].reset_index(drop=True)
        ev_spec = arch.stream(flow.stream)
        outputs: list[tuple[str, pd.DataFrame, str | None]] = [(flow.stream, events, query.eid)]
        contexts = {}
        reads = arch if self.flags is None else FlaggedReads(arch, self.flags)  # contexts read through the flags
        for cq in self.deployed.contexts.get(name, []):
            cx, _schema = compute_context(self.spark(), reads, cq, events, ev_spec, query.eid, query.ts)
            outputs.append((context_stream(name, cq.name), cx, query.eid))  # a live event's context rows are its own
            contexts[cq] = cx
        self.on_materialized(name, events, contexts)
        chunks_of = {s: arch.chunks(s) for s in self._streams(name)}
        replaced: dict[str, set[int]] = {stream: set() for stream, _, _ in outputs}
        out = []
        for uid in sorted(unit_ids, reverse=True):
            written = self._replace_unit(name, grid.bounds(uid), outputs, chunks_of, replaced)
            tag_sources(arch, [(s, c) for s in query.inputs for c in _within(chunks_of, s, *grid.bounds(uid))],
                        tag_of(name))
            self.units.record(name, uid, read_from[uid])
            out.append(ChunkResult(uid, written[0], sum(written[1:]), 0.0))
        for stream, ids in replaced.items():  # their Similarity Recall indexes are built in the background
            simindex.ready(arch, stream, ids)
        per = (time.perf_counter() - t0) / max(1, len(out))
        return [ChunkResult(r.chunk_id, r.events, r.context_rows, per) for r in out]

    def _replace_unit(self, name: str, bounds: tuple[datetime, datetime],
                      outputs: list[tuple[str, pd.DataFrame, str | None]], chunks_of: dict[str, list],
                      replaced: dict[str, set[int]]) -> list[int]:
        """Replace every output chunk inside one unit; the rows written per output."""
        lo, hi = bounds
        ts = self.deployed.event_queries[name].ts
        written = [0] * len(outputs)
        for i, (stream, frame, key) in enumerate(outputs):
            og = self.archiver.grid_of(stream)
            cid_of = _chunk_of(frame, ts, og) if len(frame) else None
            ids = set(_within(chunks_of, stream, lo, hi))
            if cid_of is not None:
                inside = (cid_of >= og.chunk_of(lo)) & (cid_of < og.chunk_of(hi))
                ids.update(int(c) for c in set(cid_of[inside].tolist()))
            for cid in sorted(ids, reverse=True):
                part = frame[cid_of == cid] if cid_of is not None else frame
                written[i] += replace_materialization(self.archiver, stream, cid, part, key, [], tag_of(name))
                replaced[stream].add(cid)
        return written

    def live_frontier(self, name: str) -> datetime | None:
        """The event time from which the live event-query ``name``, not its replica, writes
        the events: its sink's watermark (:meth:`moirae.ingest.live.EventFlow.emitted_below`), else
        the lowest watermark of its running inputs (less a row pattern's hold); None when
        neither runs.

        A replica reads a growing chunk in batch mode, where Spark emits every window, also
        one whose rows are still arriving: its partial average can cross the threshold and
        leave an event the live query never emits, or miss one it will. Below the frontier
        every window is whole (late rows aside), and at or above it the live query emits the
        event itself, superseding any replica row of the same key (M 4.2,
        :func:`archive.materialized.supersede`).
        """
        flow = self.deployed.flows.get(name)
        wm = flow.emitted_below() if flow is not None else None
        if wm is not None:
            return wm
        marks = [self.sources.watermark(s) for s in self.deployed.event_queries[name].inputs]
        hold = flow.sink.hold if flow is not None else timedelta(0)  # a row pattern's: see emitted_below
        return None if not marks or any(m is None for m in marks) else min(marks) - hold

    def raw_chunks(self, name: str, since: datetime | None = None, until: datetime | None = None,
                   tiers: tuple[Tier, ...] | None = None) -> list[int]:
        """Units (:meth:`unit_grid`) holding a raw input chunk of the query in
        ``[since, until)`` (of the given tiers), newest first."""
        grid = self.unit_grid(name)
        ids: set[int] = set()
        for s in self.deployed.event_queries[name].inputs:
            for c in self.archiver.chunks(s):
                if (since is None or c.end > since) and (until is None or c.start < until) and \
                        (tiers is None or c.tier in tiers):
                    ids.add(grid.chunk_of(c.start))
        return sorted(ids, reverse=True)

    def done_units(self, name: str) -> set[int]:
        """Units whose every raw input chunk carries the query's materialization tag."""
        grid = self.unit_grid(name)
        seen: set[int] = set()
        undone: set[int] = set()
        for s in self.deployed.event_queries[name].inputs:
            tagged = materialized_chunks(self.archiver, s, tag_of(name))
            for c in self.archiver.chunks(s):
                uid = grid.chunk_of(c.start)
                seen.add(uid)
                if c.chunk_id not in tagged:
                    undone.add(uid)
        return seen - undone

    def rematerialize(self, name: str, since: datetime | None = None, until: datetime | None = None,
                      resume: bool = False, on_chunk: Callable[[ChunkResult, int, int], None] | None = None,
                      batch: int = 1) -> list[ChunkResult]:
        """Re-process raw chunks into ``name``'s event and context streams, newest first,
        one unit (:meth:`unit_grid`) at a time.

        Each output chunk is replaced atomically; ``resume`` skips units already
        materialized. ``batch`` consecutive units share one Spark job (fewer, larger jobs
        for long ranges). ``on_chunk(result, done, total)`` reports progress.
        """
        queries = self.deployed.event_queries
        if name not in queries:
            raise QueryDefinitionError(f"unknown event-query {name!r} (deployed: {sorted(queries)})")
        for s in queries[name].inputs:
            self.archiver.stream(s)  # UnknownStream names it
        todo = self.raw_chunks(name, since, until)
        if resume:
            done = self.done_units(name)
            todo = [c for c in todo if c not in done]
        out: list[ChunkResult] = []
        for group in _runs(todo, batch):
            for res in self.materialize_range(name, group):
                out.append(res)
                if on_chunk is not None:
                    on_chunk(res, len(out), len(todo))
        return out


def _within(chunks_of: dict[str, list], stream: str, lo: datetime, hi: datetime) -> list[int]:
    return [c.chunk_id for c in chunks_of[stream] if lo <= c.start and c.end <= hi]


def _chunk_of(frame: pd.DataFrame, ts: str, grid):
    us = frame[ts].astype("datetime64[us, UTC]").astype("int64").to_numpy()
    return us // grid.span_us


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

    def __init__(self, materializer: Materializer, name: str, tickets: int) -> None:
        self.materializer = materializer
        self.event = name
        self.name = f"replica_{name}"
        self.tickets = tickets
        query = materializer.deployed.event_queries[name]
        self.query = materializer.archiver.prepare(f"SELECT count(*) AS n FROM {query.inputs[0]}")

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        m = self.materializer
        chunks = m.raw_chunks(self.event, tiers=(Tier.PRESENT, Tier.RECENT))
        bound = m.unit_grid(self.event).bounds(chunks[-1])[0] if chunks else event["ts"]
        return TaskSpec(operator=self.name, eid=str(event["eid"]), event_ts=event["ts"], query=self.query,
                        params={}, bound=bound, tickets=self.tickets,
                        materialization=True)

    def start(self, spec: TaskSpec) -> _ReplicaState:
        return _ReplicaState(spec)

    def on_chunk(self, state: _ReplicaState, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        """``chunk_id`` is a chunk of the first input (the task's query reads it); its unit
        is materialized once per task, unless an earlier run did and none of the unit's
        input chunks is still present (growing)."""
        m = self.materializer
        arch = m.archiver
        inputs = m.deployed.event_queries[self.event].inputs
        grid = m.unit_grid(self.event)
        uid = grid.chunk_of(arch.grid_of(inputs[0]).bounds(chunk_id)[0])
        if uid in state.chunks:
            return []
        lo, hi = grid.bounds(uid)
        growing = any(c.tier is Tier.PRESENT for s in inputs for c in arch.chunks(s) if lo <= c.start < hi)
        if not growing and uid in m.done_units(self.event):
            return []  # a sealed unit materialized before (e.g. by an earlier run)
        if growing and m.units.unchanged(self.event, uid, m.unit_inputs(self.event, [uid], grid)[uid]):
            return []  # materialized from the rows it holds now (moirae.materialize.unit_inputs)
        with m.claims.holding(self.event, uid) as mine:
            if mine:  # else a recall task's replica2 was materializing it: done meanwhile
                m.materialize_chunk(self.event, uid)
        state.chunks.append(uid)
        return []

    def on_end(self, state: _ReplicaState, reason: EndReason) -> list[Output]:
        return []


def replica_event(name: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"eid": f"materialize:{name}:{now.strftime('%Y%m%dT%H%M%S')}", "ts": now}


__all__ = ["ChunkResult", "Materializer", "ReplicaOperator", "event_stream", "rematerialize", "replica_event"]


def rematerialize(materializer: Materializer, name: str, since: datetime | None = None,
                  until: datetime | None = None, resume: bool = False,
                  on_chunk: Callable[[ChunkResult, int, int], None] | None = None, batch: int = 1) -> list[ChunkResult]:
    """:meth:`Materializer.rematerialize` (``moirae rematerialize``; the engine's is ``engine.materializer``)."""
    return materializer.rematerialize(name, since, until, resume, on_chunk, batch)
