"""What a materialized unit was computed from, so that the replica does not compute a
growing unit again when nothing it reads has changed (M 4.2).

The replica task (:class:`moirae.materialize.replica.ReplicaOperator`) re-creates an event-query's
present and recent history unit by unit. A unit with a chunk still in the present tier
is *growing* and was always computed again, since rows may have arrived. At every start
that meant one Spark job per present unit even when no row had arrived since the units
were materialized (by :meth:`moirae.materialize.replica.Materializer.rematerialize` a moment
before, say), competing with the live queries at every start.

A unit's *inputs* are the catalog rows (stream, chunk id, rows, late rows) of every
chunk its events and contexts read: the event-query's inputs and its context-queries'
inputs, from the longest look-back before the unit (the event-query's U, a context
window) to the longest look-ahead after it (a surrounding context's ``after``), plus
the names of the context-queries (a new one adds output). Rows only reach a chunk
through an append, which adds to its count in the same transaction; a chunk dropped or
created changes the set. So equal inputs mean the unit's materialization was computed
from the same rows. The ledger is in memory: after a restart each growing unit is
computed once again, as before.

What moves on its own is not an input: the live query's frontier (events at or above
it are the live query's to write, and it writes them; see
:meth:`moirae.materialize.replica.Materializer.live_frontier`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from archive import Archiver
from archive.abc import ChunkGrid
from moirae.queries.hybrid import ContextQuery, EventQuery

Inputs = tuple


class UnitLedger:
    """``(event-query, unit) -> inputs`` of the last materialization of each unit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inputs: dict[tuple[str, int], Inputs] = {}

    def record(self, name: str, unit: int, inputs: Inputs) -> None:
        with self._lock:
            self._inputs[(name, unit)] = inputs

    def unchanged(self, name: str, unit: int, inputs: Inputs) -> bool:
        """Whether ``unit`` of ``name`` was materialized from exactly ``inputs``."""
        with self._lock:
            return self._inputs.get((name, unit)) == inputs


class UnitClaims:
    """Which ``(event-query, unit)`` is being materialized now, in this process: replica1
    and replica2 (:mod:`moirae.materialize.replica2`) claim a unit before materializing
    it, so two tasks never compute one unit at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[tuple[str, int], threading.Event] = {}
        self.waits = 0  # times a task waited for another's unit instead of re-processing it

    def try_claim(self, name: str, unit: int) -> bool:
        with self._lock:
            if (name, unit) in self._busy:
                return False
            self._busy[(name, unit)] = threading.Event()
            return True

    def release(self, name: str, unit: int) -> None:
        with self._lock:
            ev = self._busy.pop((name, unit), None)
        if ev is not None:
            ev.set()

    def wait(self, name: str, unit: int, timeout: float | None = None) -> None:
        """Until ``unit`` is no longer claimed."""
        with self._lock:
            ev = self._busy.get((name, unit))
        if ev is not None:
            self.waits += 1
            ev.wait(timeout)

    @contextmanager
    def holding(self, name: str, unit: int, timeout: float | None = None) -> Iterator[bool]:
        """Claim ``unit`` for the block (True), or wait for its holder and yield False."""
        if not self.try_claim(name, unit):
            self.wait(name, unit, timeout)
            yield False
            return
        try:
            yield True
        finally:
            self.release(name, unit)


def unit_inputs(arch: Archiver, query: EventQuery, U: timedelta, contexts: Sequence[ContextQuery],  # noqa: N803
                units: list[int], grid: ChunkGrid) -> dict[int, Inputs]:
    """The inputs (see the module doc) of each of ``units`` of event-query ``query`` (whose
    expiry bound is ``U``, with its ``contexts``) on ``grid``
    (:meth:`moirae.materialize.replica.Materializer.unit_grid`), from one catalog read per stream."""
    before = max([U, *(cq.window for cq in contexts)], default=timedelta(0))
    after = max([cq.after for cq in contexts], default=timedelta(0))
    streams = list(dict.fromkeys([*query.inputs, *(s for cq in contexts for s in cq.inputs)]))
    lo_all, hi_all = grid.bounds(min(units))[0] - before, grid.bounds(max(units))[1] + after
    catalog = {s: [c for c in arch.chunks(s) if c.end > lo_all and c.start < hi_all] for s in streams}
    names = tuple(sorted(cq.name for cq in contexts))
    out = {}
    for uid in units:
        lo, hi = grid.bounds(uid)
        lo, hi = lo - before, hi + after
        out[uid] = (names, *((s, c.chunk_id, c.rows, c.late_rows) for s in streams for c in catalog[s]
                             if c.end > lo and c.start < hi))
    return out
