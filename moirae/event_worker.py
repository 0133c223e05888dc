"""New events leave the event-query's micro-batch for a worker thread (issue 11 §2).

The micro-batch archives its events (exactly once, ``ev_<name>``) and hands them over;
the worker waits for the context inputs, computes the contexts (one SQL read per input
and one Spark job per context-query, for the whole batch of events), records the events
and submits their recall tasks. The streaming query's batch time then no longer holds
the archive waits, the context-queries' Spark job or the recall submissions, so the
event-query keeps its trigger. The queue is bounded: when the worker falls behind, the
hand-over blocks the micro-batch (backpressure, never an unbounded backlog).

Nothing is lost: Spark commits a batch once its ``foreachBatch`` returns, possibly before
the worker is done with it. The events are archived by then, so after a crash they are
in ``ev_<name>`` with a live batch id (>= 0) but not in the event log;
:func:`unlogged_events` finds them when the engine starts again, and they are processed
under their own batch ids (their context rows are archived exactly once).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

import pandas as pd

from archive.names import quote

log = logging.getLogger(__name__)

_STOP = object()


class EventWorker:
    """One thread processing handed-over event batches in arrival order."""

    def __init__(self, process: Callable, maxsize: int = 32) -> None:
        self.process = process
        self._q: queue.Queue = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self.batches = 0
        self.errors = 0
        self.last_error: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if not self.running:
            self._thread = threading.Thread(target=self._loop, name="moirae-events", daemon=True)
            self._thread.start()

    def submit(self, *item) -> None:
        """Hand over one batch (blocks while the queue is full); processed inline when no
        worker runs."""
        if self.running:
            self._q.put(item)
        else:
            self.process(*item)

    def pending(self) -> int:
        return self._q.qsize()

    def stop(self, timeout: float = 60.0) -> None:
        """Process what was handed over, then stop."""
        if self.running:
            self._q.put(_STOP)
            self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            try:
                self.process(*item)
                self.batches += 1
            except Exception as exc:  # keep serving; the events stay archived and are recovered at restart
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("moirae: processing a batch of new events failed")


def unlogged_events(db, stream: str, eid: str, cols: list[str]) -> pd.DataFrame:
    """Live events archived in ``stream`` that the event log has not recorded (a crash
    between Spark's commit and the worker), with their batch id ``_batch``."""
    sel = ", ".join(f"e.{quote(c)}" for c in ["_batch", *cols])
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {sel} FROM {quote(stream)} e WHERE e._batch >= 0 AND NOT EXISTS "
                    f"(SELECT 1 FROM moirae_events m WHERE m.eid = e.{quote(eid)}::text) ORDER BY e._batch")
        return pd.DataFrame(cur.fetchall(), columns=["_batch", *cols])
