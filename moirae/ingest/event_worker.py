"""New events leave the event-query's micro-batch for a worker thread (docs/ARCHITECTURE.md, 3.2).

The micro-batch archives its events (exactly once, ``ev_<name>``) and hands them over;
the worker waits for the context inputs, computes the contexts (one SQL read per input
and one Spark job per context-query, for the whole batch of events), records the events
and submits their recall tasks. The streaming query's batch time then no longer holds
the archive waits, the context-queries' Spark job or the recall submissions, so the
event-query keeps its trigger. When batches wait in the queue (the worker fell
behind), it takes them all at once and processes those of one event-query together
(``many``): one archive wait and one run of each context-query for all of them, so a
backlog costs about one batch's fixed cost, not one per batch. The queue is bounded:
when the worker falls behind, the hand-over blocks the micro-batch (backpressure, never
an unbounded backlog).

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

    def __init__(self, process: Callable, maxsize: int = 32, many: Callable | None = None) -> None:
        self.process = process
        self.many = many  # many(flow, [(rest of item) ...]): several items of one flow at once
        self._q: queue.Queue = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self.batches = 0
        self.skipped = 0  # batches of a retired flow, not processed
        self._current = None  # the flow whose batches run now
        self._idle = threading.Condition()
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
        if getattr(item[0], "retired", False):  # its monitor is being retired (its events stay archived)
            self.skipped += 1
            return
        if self.running:
            self._q.put(item)
        else:
            self.process(*item)

    def pending(self) -> int:
        return self._q.qsize()

    def drain(self, timeout: float = 60.0) -> bool:
        """Return once every batch handed over before this call is processed (False when
        ``timeout`` passed first); at once when no worker runs (batches run inline)."""
        if not self.running:
            return True
        done = threading.Event()
        self._q.put(done)
        return done.wait(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Process what was handed over, then stop."""
        if self.running:
            self._q.put(_STOP)
            self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        while True:
            items = [self._q.get()]
            while items[-1] is not _STOP:  # the backlog, taken at once
                try:
                    items.append(self._q.get_nowait())
                except queue.Empty:
                    break
            stop = items[-1] is _STOP
            for group in _runs([i for i in items if isinstance(i, tuple)]):
                self._run(group)
            for marker in items:  # a drain waits for every batch handed over before it
                if isinstance(marker, threading.Event):
                    marker.set()
            if stop:
                return

    def forget(self, flow, timeout: float = 60.0) -> bool:
        """Process no more batches of ``flow`` (retired with its monitor; its events stay
        archived): the ones queued are skipped and a run of its batches under way is
        waited for (False when ``timeout`` passed first)."""
        flow.retired = True
        with self._idle:
            return self._idle.wait_for(lambda: self._current is not flow, timeout)

    def _run(self, group: list[tuple]) -> None:
        flow = group[0][0]
        if getattr(flow, "retired", False):
            self.skipped += len(group)
            return
        with self._idle:
            self._current = flow
        try:
            self._run_group(group)
        finally:
            with self._idle:
                self._current = None
                self._idle.notify_all()

    def _run_group(self, group: list[tuple]) -> None:
        if len(group) > 1 and self.many is not None:
            self._guarded(lambda: self.many(group[0][0], [item[1:] for item in group]), len(group))
        else:
            for item in group:
                self._guarded(lambda item=item: self.process(*item), 1)

    def _guarded(self, fn: Callable[[], None], n: int) -> None:
        try:
            fn()
            self.batches += n
        except Exception as exc:  # keep serving; the events stay archived and are recovered at restart
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("moirae: processing %d batch(es) of new events failed", n)


def _runs(items: list[tuple]) -> list[list[tuple]]:
    """Consecutive items with the same first element (the event flow), in order.

    >>> _runs([("a", 1), ("a", 2), ("b", 3), ("a", 4)])
    [[('a', 1), ('a', 2)], [('b', 3)], [('a', 4)]]
    """
    out: list[list[tuple]] = []
    for item in items:
        if out and out[-1][0][0] is item[0]:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def unlogged_events(db, stream: str, eid: str, cols: list[str]) -> pd.DataFrame:
    """Live events archived in ``stream`` that the event log has not recorded (a crash
    between Spark's commit and the worker), with their batch id ``_batch``."""
    sel = ", ".join(f"e.{quote(c)}" for c in ["_batch", *cols])
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {sel} FROM {quote(stream)} e WHERE e._batch >= 0 AND NOT EXISTS "
                    f"(SELECT 1 FROM moirae_events m WHERE m.eid = e.{quote(eid)}::text) ORDER BY e._batch")
        return pd.DataFrame(cur.fetchall(), columns=["_batch", *cols])
