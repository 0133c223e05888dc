"""Raw history re-processed on demand for recall tasks (M 4.3-4.4, fig. 8 "replica2";
docs/ARCHITECTURE.md, 3.3).

A deployed event-query's events and contexts are materialized over its newest raw
chunks only (replica1, :class:`moirae.materialize.replica.ReplicaOperator`). When a
Recall or Similarity Recall task over those streams has read every materialized chunk,
the Recall Manager asks :class:`RawHistory` (the engine's
:class:`recall.replica2.HistoryReplica`) for the raw history just older than what the
task has searched. :meth:`RawHistory.produce` re-processes it, newest unit first, with
the same event- and context-query functions (:meth:`moirae.materialize.replica.Materializer.materialize_range`),
inside the task's quantum: the task keeps its tickets and priority (M 4.4). The output is
kept: archived in the event and context streams, the raw chunks tagged, the similarity
indexes built (so the next task reads it as materialized).

A unit *needs re-processing* when it is not materialized (not every raw input chunk
carries the query's tag) and is older than the newest materialized unit (newer units
are the live query's). Units are claimed (:class:`UnitClaims`, shared with replica1):
a task reaching a unit another task is re-processing waits for it and reads its output,
so no unit is re-processed twice at once; after a claim the catalog is read again, so a
unit materialized meanwhile is not re-processed at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime

from moirae.materialize.replica import Materializer
from moirae.materialize.unit_inputs import UnitClaims
from moirae.queries.hybrid import context_stream
from recall.replica2 import ReplicaStep

#: seconds the set of materialized units is trusted before the catalog is read again
DONE_TTL = 5.0
#: materialized units one quantum may pass over (listing their chunks) without re-processing
SKIP_RUN = 512


class RawHistory:
    """:class:`recall.replica2.HistoryReplica` over a :class:`Materializer` (module doc)."""

    def __init__(self, materializer: Materializer, claims: UnitClaims | None = None) -> None:
        self.m = materializer
        self.claims = claims if claims is not None else materializer.claims
        self._lock = threading.Lock()
        self._units: dict[str, tuple[tuple, list[int]]] = {}  # query -> (catalog key, raw units newest first)
        self._done: dict[str, tuple[float, set[int]]] = {}  # query -> (read at, materialized units)
        self.reprocessed = 0  # units re-processed by this replica

    # -- which query, which units ---------------------------------------------------------

    def query_of(self, streams: Sequence[str]) -> str | None:
        """The deployed event-query whose events or contexts ``streams`` read, if any."""
        d = self.m.deployed
        wanted = set(streams)
        for name, flow in list(d.flows.items()):
            out = {flow.stream, *(context_stream(name, cq.name) for cq in d.contexts.get(name, []))}
            if wanted & out:
                return name
        return None

    def raw_units(self, name: str) -> list[int]:
        """Units (:meth:`Materializer.unit_grid`) holding raw input chunks of ``name``, newest first."""
        arch = self.m.archiver
        inputs = self.m.deployed.event_queries[name].inputs
        ids = arch.chunk_ids(inputs)
        grid, in_grid = self.m.unit_grid(name), arch.grid_for(inputs)
        key = (len(ids), ids[0] if ids else None, ids[-1] if ids else None, grid.span, in_grid.span)
        with self._lock:
            hit = self._units.get(name)
            if hit is not None and hit[0] == key:
                return hit[1]
        units = sorted({grid.chunk_of(in_grid.bounds(c)[0]) for c in ids}, reverse=True)
        with self._lock:
            self._units[name] = (key, units)
        return units

    def done(self, name: str, fresh: bool = False) -> set[int]:
        """Materialized units of ``name`` (read again after :data:`DONE_TTL`, or now if ``fresh``)."""
        with self._lock:
            hit = self._done.get(name)
        if hit is not None and not fresh and time.monotonic() - hit[0] < DONE_TTL:
            return hit[1]
        units = self.m.done_units(name)
        with self._lock:
            self._done[name] = (time.monotonic(), units)
        return units

    def _older(self, name: str, before: datetime, bound: datetime | None) -> list[int]:
        grid = self.m.unit_grid(name)
        out = []
        for u in self.raw_units(name):
            lo, hi = grid.bounds(u)
            if bound is not None and hi <= bound:
                break
            if lo < before:
                out.append(u)
        return out

    # -- HistoryReplica --------------------------------------------------------------------

    def remaining(self, streams: Sequence[str], before: datetime, bound: datetime | None) -> int | None:
        name = self.query_of(streams)
        return None if name is None else len(self._older(name, before, bound))

    def produce(self, streams: Sequence[str], before: datetime, bound: datetime | None,
                units: int = 1) -> ReplicaStep | None:
        name = self.query_of(streams)
        if name is None:
            return None
        todo = self._older(name, before, bound)
        if not todo:
            return None
        grid = self.m.unit_grid(name)
        done = self.done(name)
        newest_done = max(done) if done else None

        def needs(u: int) -> bool:
            return u not in done and (newest_done is None or u < newest_done)

        skipped = 0
        while skipped < len(todo) and skipped < SKIP_RUN and not needs(todo[skipped]):
            skipped += 1
        if skipped:  # materialized already (by replica1 or another task): only their chunks are read
            oldest = todo[skipped - 1]
            return ReplicaStep(grid.bounds(oldest)[0], before, 0, len(todo) - skipped)
        run = self._claim_run(name, todo, units, needs)
        if not run:  # another task holds the newest one: it was waited for, its output is read
            return ReplicaStep(grid.bounds(todo[0])[0], before, 0, len(todo) - 1)
        try:
            fresh = self.done(name, fresh=True)  # materialized meanwhile (another process, replica1)?
            work = [u for u in run if u not in fresh]
            if work:
                self.m.materialize_range(name, work)
                with self._lock:
                    self._done[name][1].update(work)
                self.reprocessed += len(work)
        finally:
            for u in run:
                self.claims.release(name, u)
        return ReplicaStep(grid.bounds(run[-1])[0], before, len(work), len(todo) - len(run))

    def _claim_run(self, name: str, todo: list[int], units: int, needs) -> list[int]:
        """Claim the newest units of ``todo`` that need re-processing, consecutive, at most
        ``units``; [] after waiting for the holder of the first."""
        run: list[int] = []
        for u in todo:
            if len(run) >= units or not needs(u) or (run and u != run[-1] - 1):
                break
            if not self.claims.try_claim(name, u):
                if not run:
                    self.claims.wait(name, u)
                break
            run.append(u)
        return run
