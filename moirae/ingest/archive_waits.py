"""How far each source stream is archived, and waiting until it is archived far enough.

A context- or history-query for an event at ``ts`` must see every source tuple up to
``ts`` (M 3.3), so the live path waits for the archive of the streams it reads
(:meth:`ArchiveWaits.wait`). The archive queries report each committed batch
(:meth:`ArchiveWaits.archived`, :meth:`ArchiveWaits.batch_done`); a sparse source with
nothing new is recognised as caught up from Spark's own status (:mod:`moirae.runtime.idle`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from moirae.runtime.idle import idle_tick, tick_ms

log = logging.getLogger(__name__)

#: how often a wait asks Spark whether a lagging sparse source's archive query is idle
IDLE_POLL_S = 0.05
#: how late after its tick a trigger may start (the status before it is not yet its own)
IDLE_SLACK_S = 0.25


class ArchivedStreams(Protocol):
    """What the waits need to know of the sources (:class:`moirae.ingest.sources.SourceRegistry`)."""

    def live(self, streams: Iterable[str]) -> list[str]:
        """The streams among ``streams`` whose archive is being written now."""

    def is_sparse(self, name: str) -> bool: ...

    def archive_query(self, name: str) -> tuple[Any, float]:
        """The streaming query archiving ``name`` and the wall time it started."""


class ArchiveWaits:
    """Per source: the newest event time archived, and whether it is caught up."""

    def __init__(self, sources: ArchivedStreams, trigger_s: Callable[[], float]) -> None:
        self._sources = sources
        self._trigger_s = trigger_s
        self._upto: dict[str, datetime] = {}
        self._cond = threading.Condition()
        self._waiting: dict[object, tuple[datetime, list[str]]] = {}
        self._empty_batch: dict[str, bool] = {}
        self._caught_up: dict[str, float] = {}  # stream -> start (wall s) of its last empty archive batch
        self._written: dict[str, int] = {}  # stream -> batches with rows archived so far
        self._stopped: set[str] = set()  # streams whose archiving query was stopped (:meth:`stopped`)
        self.counts = {"count": 0, "timed_out": 0, "caught_up_idle": 0, "seconds": 0.0, "timeouts_by_stream": {}}

    def archived(self, name: str, result) -> None:
        """A batch of ``name`` was written (``result``: an :class:`archive.AppendResult`)."""
        with self._cond:
            if result.rows == 0 and not result.duplicate:
                self._empty_batch[name] = True
            elif result.rows and not result.duplicate:
                self._written[name] = self._written.get(name, 0) + 1
            if result.max_ts is None:
                return
            prev = self._upto.get(name)
            if prev is None or result.max_ts > prev:
                self._upto[name] = result.max_ts
            self._cond.notify_all()

    def written(self, name: str) -> int:
        """How many batches with rows this process has archived into ``name``: a stamp
        that changes whenever the stream's newest pages do (by this process's writes)."""
        with self._cond:
            return self._written.get(name, 0)

    def batch_done(self, name: str, started: float) -> None:
        """A source's archive batch that began at ``started`` (wall s) committed; an
        empty one means the source had nothing more to give at that instant (caught up)."""
        with self._cond:
            if self._empty_batch.pop(name, False):
                self._caught_up[name] = started
            self._cond.notify_all()

    def stopped(self, name: str) -> None:
        """Source ``name``'s archive query was stopped and the source unregistered: waits
        on it end now instead of at their timeout (:meth:`stopped_short` names it while it
        is not archived again)."""
        with self._cond:
            self._stopped.add(name)
            self._cond.notify_all()

    def wait(self, streams, ts: datetime, timeout: float, why: str = "", since: float | None = None) -> bool:
        """Block until every source in ``streams`` has archived data up to ``ts`` (so a
        context- or history-query for an event at ``ts`` sees all of it), or ``timeout``
        passes. A source whose archive query committed an *empty* batch is caught up (a
        sparse stream: nothing newer existed when that batch read it) and counted as
        such, if that batch began after the wait began or, given ``since`` (the wall
        time the micro-batch that detected the events began), at or after ``since``'s
        trigger tick. Spark starts the batches of every query on the same trigger ticks
        (multiples of the interval), reading each source at that instant: a sparse
        source with nothing new at the tick the events were detected has nothing more
        up to the events' time either (sources delivering in event-time order). A
        source registered ``sparse`` whose offsets stand still runs no empty batch: the
        wait asks Spark every ``IDLE_POLL_S`` whether its archive query found nothing
        new at such a tick (:meth:`_probe_idle`). A wait that times out is logged and
        counted per lagging stream (:meth:`status`); the caller goes on with what is
        archived."""
        live = self._sources.live(dict.fromkeys(streams))
        t0 = time.monotonic()
        wall0 = time.time()

        def caught_up(s: str) -> bool:
            began = self._caught_up.get(s)
            if began is None:
                return False
            return began >= wall0 if since is None else self._tick(began) >= self._tick(since)

        def lagging() -> list[str]:  # a source unregistered meanwhile (its monitor retired) lags no more
            still = set(self._sources.live(live))
            return [s for s in live
                    if s in still and (self._upto.get(s) is None or self._upto[s] < ts) and not caught_up(s)]

        with self._cond:
            late = self._wait_for(lagging, [s for s in live if self._sources.is_sparse(s)], ts, t0 + timeout)
            self._count(live, late, ts, t0)
        if late:
            log.warning("moirae: waited %.1f s for %s to be archived up to %s%s; going on without their "
                        "latest rows (archived up to %s)", timeout, late, ts.isoformat(), f" ({why})" if why else "",
                        {s: str(self._upto.get(s)) for s in late})
        return not late

    def stopped_short(self, streams, ts: datetime) -> dict[str, datetime | None]:
        """The sources among ``streams`` whose archiving stopped (their archive query, or
        the event-query whose read archives them, was stopped, :meth:`stopped`, and is not
        running again, :meth:`ArchivedStreams.live`) short of ``ts``, each with the newest
        event time archived (None: none). A wait on them ends at once, not because they
        reached ``ts``: nothing newer of them is archived until they are started again."""
        streams = list(dict.fromkeys(streams))
        live = set(self._sources.live(streams))
        with self._cond:
            return {s: self._upto.get(s) for s in streams if s in self._stopped and s not in live
                    and (self._upto.get(s) is None or self._upto[s] < ts)}

    def _wait_for(self, lagging: Callable[[], list[str]], probe: list[str], ts: datetime,
                  deadline: float) -> list[str]:
        """Wait (holding the condition) until nothing lags or ``deadline``; the laggards."""
        token = object()
        self._waiting[token] = (ts, lagging())
        try:
            while (late := lagging()) and (left := deadline - time.monotonic()) > 0:
                asked = [s for s in late if s in probe]
                if asked:  # Spark's status, outside the lock the archive callbacks take
                    self._cond.release()
                    try:
                        self._probe_idle(asked)
                    finally:
                        self._cond.acquire()
                self._cond.wait_for(lambda: not lagging(), min(left, IDLE_POLL_S) if asked else left)
        finally:
            del self._waiting[token]
        return late

    def _count(self, live: list[str], late: list[str], ts: datetime, t0: float) -> None:
        idle = [s for s in live if s not in late and (self._upto.get(s) is None or self._upto[s] < ts)]
        self.counts["caught_up_idle"] += len(idle)
        self.counts["count"] += 1
        self.counts["seconds"] += time.monotonic() - t0
        if late:
            self.counts["timed_out"] += 1
            for s in late:
                self.counts["timeouts_by_stream"][s] = self.counts["timeouts_by_stream"].get(s, 0) + 1

    def _probe_idle(self, names: list[str]) -> None:
        """Mark the sparse sources among ``names`` whose archive query found nothing new
        at a trigger tick as caught up at that tick (:func:`moirae.runtime.idle.idle_tick`). A
        source an event-query's read archives is probed through that query: a trigger of
        it that found nothing new found nothing in any of its inputs, and each batch
        commits the shared inputs' rows before it ends."""
        interval = self._trigger_s()
        for name in names:
            query, started = self._sources.archive_query(name)
            if query is None:
                continue
            try:
                tick = idle_tick(query, started, interval, time.time(), max(IDLE_SLACK_S, interval / 2))
            except Exception as e:  # noqa: BLE001 - a stopped query, a JVM gone: wait as without the probe
                log.debug("moirae: could not read the status of %s's archive query: %s", name, e)
                continue
            if tick is None:
                continue
            with self._cond:
                if tick > self._caught_up.get(name, float("-inf")):
                    self._caught_up[name] = tick
                    self._cond.notify_all()

    def _tick(self, wall: float) -> int:
        """The trigger tick (ms, a multiple of the trigger interval) a batch begun at
        ``wall`` (epoch s) belongs to."""
        return tick_ms(wall, self._trigger_s())

    def status(self) -> dict[str, Any]:
        """``archive_waits`` (count, time, timeouts per stream, the waits under way) and
        ``archived_upto`` per source."""
        with self._cond:
            waits = {**self.counts, "seconds": round(self.counts["seconds"], 3),
                     "timeouts_by_stream": dict(self.counts["timeouts_by_stream"])}
            upto = {s: t.isoformat() for s, t in self._upto.items()}
            waits["now"] = [{"until": ts.isoformat(), "streams": streams} for ts, streams in self._waiting.values()]
        return {"archive_waits": waits, "archived_upto": upto}
