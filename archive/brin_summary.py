"""Keeping a stream's BRIN summaries up with its newest rows (for :mod:`archive.contributors`).

A BRIN index summarizes a range of heap pages once asked to (or once autovacuum gets to
it, a minute later by default); until then a scan reads every page of the range. The
window reads of live provenance ask for the newest rows, so the pages they need are
the ones written since the last summary (:mod:`archive.brin_pages`). Summarizing them
on the reader's path would put that cost, a small one per row at the stream's full
rate, on the event-query's batch thread, with the Spark job of the next batch waiting
behind it.

So a :class:`Summarizer` does it in the background, every ``period`` seconds, for the
stream's present chunks; a reader then asks it (:meth:`Summarizer.now`) for the few
pages written since its last pass. Given a ``written`` stamp (what this process has
archived into the stream), a pass is skipped while the stamp has not changed since the
last one, but made at least every :data:`IDLE_PASS_S` for rows another process wrote:
a pass reads the catalog and asks every present chunk's index, so at a quarter of a
short trigger, passes over nothing new were most of the summarizer's cost. One summarizer per stream in a process, and one pass
at a time (two would queue on the index's lock); a summary that autovacuum is making
meanwhile is left to it (the reader reads those pages unsummarized: correct, slower).

Its owner stops it (:meth:`Summarizer.stop`). The thread holds its summarizer weakly:
one its owner dropped without stopping it (nothing else holds it) ends at its next tick,
so it never goes on summarizing for an owner that is gone, on a schema that may be gone
with it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime

from archive.abc import Tier
from archive.brin_pages import span_chunks, summarize
from archive.contributors import ensure_time_index
from archive.names import partition_name

__all__ = ["Summarizer", "restore_claimed", "span_chunks", "summarize"]

log = logging.getLogger(__name__)

IDLE_PASS_S = 5.0
"""The longest a summarizer with a ``written`` stamp goes without a pass."""


def restore_claimed(archiver, claims) -> None:
    """After the claims were taken again (:meth:`IndexClaims.keep_alive`): ensure each
    claimed stream's index exists. While the server had lost the claims (a restart,
    until the next keep-alive check), a process started with other keys found the index
    unclaimed and dropped it, with every chunk's part of it, and this process's window
    reads would have scanned whole chunks from then on. Built again as at start
    (:func:`archive.contributors.ensure_time_index`: the present chunks and the stream's
    table; chunks created later get it with their table)."""
    for stream in claims.streams():
        try:
            ensure_time_index(archiver, stream)
        except Exception as exc:  # noqa: BLE001 - the next renewal, or the next start, tries again
            log.warning("archive: stream %r: BRIN index not restored after its claim was renewed: %s", stream, exc)


class Summarizer:
    """Summarizes one stream's BRIN index on its present chunks every ``period`` seconds
    in a thread of its own (started by :meth:`start` or :meth:`ensure`, stopped by
    :meth:`stop`, or ending by itself once nothing holds the summarizer), and on
    demand for a span (:meth:`now`). ``index`` names the index (a callable: it may change
    while the engine runs, :func:`archive.contributors.ensure_time_index`). ``written``
    (optional) returns a stamp of this process's writes to the stream; a background pass
    waits for it to change (module doc)."""

    def __init__(self, archiver, stream: str, index, period: float,
                 written: Callable[[], object] | None = None) -> None:
        self.archiver, self.stream, self.index = archiver, stream, index
        self.period = max(float(period), 0.05)
        self.written = written
        self._seen: object = None  # the stamp at the last background pass
        self._last = -1e9  # monotonic time of the last background pass
        self._lock = threading.Lock()  # one pass at a time
        self._names: dict[tuple[str, str], str] = {}  # each chunk's index name (summarize), under _lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._life = threading.Lock()  # start, ensure and stop, one at a time
        self._stopped = False  # stop() called since the last start()
        #: background passes, ranges they summarized, their seconds; on-demand calls,
        #: their ranges and seconds (those on a reader's path)
        self.stats = {"passes": 0, "ranges": 0, "seconds": 0.0, "now": 0, "now_ranges": 0, "now_seconds": 0.0,
                      "errors": 0, "skipped": 0}

    def now(self, lo: datetime, hi: datetime) -> int:
        """Summarize the chunks of ``[lo, hi]`` now (after any pass under way)."""
        t0 = time.monotonic()
        with self._lock:
            n = summarize(self.archiver, self.stream, span_chunks(self.archiver, self.stream, lo, hi), self.index(),
                          self._names)
        self.stats["now"] += 1
        self.stats["now_ranges"] += n
        self.stats["now_seconds"] += time.monotonic() - t0
        return n

    def run_once(self) -> int:
        """One background pass: the stream's present chunks. Also renews this process's
        index claims if the server lost them (:mod:`archive.index_claims`), and then
        builds again each claimed index that another process dropped meanwhile."""
        t0 = time.monotonic()
        claims = self.archiver.index_claims
        if claims.keep_alive():
            restore_claimed(self.archiver, claims)
        ids = [c.chunk_id for c in self.archiver.chunks(self.stream, Tier.PRESENT)]
        with self._lock:
            index = self.index()
            keep = {(index, partition_name(self.stream, c)) for c in ids}  # the cache holds the present tier only
            self._names = {k: v for k, v in self._names.items() if k in keep}
            n = summarize(self.archiver, self.stream, ids, index, self._names)
        self.stats["passes"] += 1
        self.stats["ranges"] += n
        self.stats["seconds"] += time.monotonic() - t0
        return n

    def start(self) -> Summarizer:
        """Start the background passes (idempotent), after a :meth:`stop` too."""
        with self._life:
            self._stopped = False
            self._spawn()
        return self

    def ensure(self) -> Summarizer:
        """Start the background passes unless :meth:`stop` was called since the last
        :meth:`start`: what a reader's path calls, so a read still under way while its
        owner stops does not start a thread nobody will stop."""
        with self._life:
            if not self._stopped:
                self._spawn()
        return self

    def stop(self) -> None:
        """Stop the background passes, waiting up to 10 s for a pass under way."""
        with self._life:
            self._stopped = True
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)

    def _spawn(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop = threading.Event()  # a thread still ending keeps the one it was given
            self._thread = threading.Thread(target=_passes, args=(weakref.ref(self), self._stop, self.period),
                                            name=f"moirae-brin-{self.stream}", daemon=True)
            self._thread.start()

    def due(self) -> bool:
        """Whether a background pass has anything to do: always without a ``written``
        stamp; with one, when it changed since the last pass or :data:`IDLE_PASS_S` went by."""
        if self.written is None:
            return True
        stamp = self.written()
        if stamp != self._seen or time.monotonic() - self._last >= IDLE_PASS_S:
            self._seen, self._last = stamp, time.monotonic()
            return True
        return False

    def _tick(self, logged: float) -> float:
        """One tick of the background thread: a pass if :meth:`due`. A failed pass is
        counted and logged at most once a minute (``logged``: monotonic time of the last
        such line; returned, updated)."""
        if not self.due():
            self.stats["skipped"] += 1
            return logged
        try:
            self.run_once()
        except Exception as exc:  # a reader summarizes on its own: count, log once a minute, go on
            self.stats["errors"] += 1
            if time.monotonic() - logged >= 60:
                logged = time.monotonic()
                log.warning("archive: summarizing the BRIN index of %r failed (%d failure(s) so far; the "
                            "next pass retries): %s", self.stream, self.stats["errors"],
                            " ".join(f"{exc}".split()))
        return logged

    def status(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()}


def _passes(ref: weakref.ref[Summarizer], stop: threading.Event, period: float) -> None:
    """A summarizer's background thread: a tick every ``period`` seconds until ``stop``
    is set, or until the summarizer is gone (``ref`` is weak: the thread alone does not
    keep it, module doc)."""
    logged = -1e9
    while not stop.wait(period):
        summarizer = ref()
        if summarizer is None:
            return
        logged = summarizer._tick(logged)
        del summarizer  # not held while waiting
