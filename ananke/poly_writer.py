"""A micro-batch's polynomials built and stored beside ANK-1's work, not before it (H 4).

The sink's polynomials of a batch (:func:`ananke.poly_spark.sink_polys` and the write to
``ank_poly``, :class:`ananke.poly_store.PolyStore`) need the batch's collected rows only,
not ANK-1's state. :class:`PolyWriter` runs that job on a thread of its own while the
batch thread feeds ANK-1; the database round trips (a digest window's values read from
the archive, the keyed insert) then overlap ANK-1's Python work instead of adding to the
batch's time.

Two gates keep what a synchronous write gave:

- **Polynomial before graph.** :meth:`PolyWriter.gate` wraps the graph's ``emit``: the
  graph's transaction for a batch begins only once the batch's polynomials are stored,
  so a source vertex never names a sink tuple whose polynomial is missing (the forward
  lookup of a retraction goes through ``ank_poly``). A failed job makes ``emit`` raise,
  and ANK-1 keeps the items pending (:meth:`ananke.ank1.Ank1Logic.batched`).
- **Exactly once across a crash.** The batch thread calls :meth:`PolyWriter.wait` before
  ``foreachBatch`` returns, so Spark commits a batch only after its polynomials are
  stored; a crash before that replays the batch, whose keyed insert stores nothing twice.
  A job that failed stays owed and is run again, first, by the next :meth:`wait` (the
  same process's replay of the batch, which ANK-1 skips, included).

>>> done = []
>>> w = PolyWriter(done.append)
>>> w.submit("batch 7")
>>> w.wait()
>>> done, w.owed
(['batch 7'], 0)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class PolyWriter:
    """Runs ``job(batch)`` (build and store one batch's polynomials) off the batch thread,
    one batch at a time, in order (module doc)."""

    def __init__(self, job: Callable[[Any], None]) -> None:
        self.job = job
        self._lock = threading.Lock()  # one waiter runs owed jobs at a time
        self._thread: threading.Thread | None = None
        self._owed: list[Any] = []  # batches whose job failed, oldest first
        #: seconds the jobs ran (on their thread); seconds the batch thread waited for them
        self.seconds = {"poly": 0.0, "poly_wait": 0.0}

    @property
    def owed(self) -> int:
        """Batches whose polynomials are not stored yet (failed, or still running)."""
        return len(self._owed) + (self._thread is not None)

    def submit(self, batch: Any) -> None:
        """Start ``batch``'s job (after the previous batch's is done)."""
        self.wait(strict=False)
        t = threading.Thread(target=self._run, args=(batch,), name="ananke-poly", daemon=True)
        with self._lock:  # a waiter on another thread (the graph's gate) sees it started
            self._thread = t
            t.start()

    def _run(self, batch: Any) -> None:
        t0 = time.perf_counter()
        try:
            self.job(batch)
        except BaseException:  # noqa: BLE001 - kept owed; the next wait runs it again and raises
            self._owed.append(batch)
        finally:
            self.seconds["poly"] += time.perf_counter() - t0

    def wait(self, strict: bool = True) -> None:
        """Return once every submitted batch's polynomials are stored: join the running
        job, then run each owed one again here, oldest first (one that fails again stays
        owed, and its error is raised; ``strict=False`` leaves owed jobs for later)."""
        t0 = time.perf_counter()
        with self._lock:
            t, self._thread = self._thread, None
            if t is not None:
                t.join()
            while strict and self._owed:
                self.job(self._owed[0])
                self._owed.pop(0)
        self.seconds["poly_wait"] += time.perf_counter() - t0

    def gate(self, emit: Callable[[list], None]) -> Callable[[list], None]:
        """``emit`` that first waits for the polynomials (module doc: polynomial before graph)."""
        def gated(items: list) -> None:
            self.wait()
            emit(items)
        return gated
