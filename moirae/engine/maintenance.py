"""The archive's maintenance job: expiry horizons, demotion, ageing and retention.

Every ``archive.maintenance_interval`` a background thread moves the expiry horizon of
each stream, demotes and ages chunks and applies retention (docs/ARCHITECTURE.md,
"Demotion by provenance"; A 5.1): a stream read by instrumented event-queries follows
Ananke's horizon ``min W_K - U`` over them, a stream context-queries read their
event-queries' sink watermark less the context window (:meth:`Maintenance._source_horizons`),
any other stream its own watermark (U = 0).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from archive import Archiver, Contributing, Database
from moirae.config import Settings
from moirae.deploy.manager import DeployManager
from moirae.ingest.persist import contributing_view
from moirae.ingest.sources import SourceRegistry
from moirae.queries.hybrid import context_stream

log = logging.getLogger(__name__)


class Maintenance:
    """One pass at a time (:meth:`once`), and the thread that runs them periodically."""

    def __init__(self, settings: Settings, db: Database, archiver: Archiver, sources: SourceRegistry,
                 deploy: DeployManager) -> None:
        self.settings = settings
        self.db = db
        self.archiver = archiver
        self.sources = sources
        self.deploy = deploy
        self._lock = threading.Lock()  # one maintenance pass at a time (see once)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._late = None  # moirae.retract.late.LateFollower, once an event-query keeps polynomials
        self._late_whole = None  # its whole-partition twin, swept every late.WHOLE_EVERY passes
        self._late_passes = 0

    def start(self) -> None:
        """Run a pass every ``archive.maintenance_interval`` until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="moirae-maintenance", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Start no further background pass."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the thread to end (after :meth:`request_stop`)."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def stop(self) -> None:
        """Stop the thread (waiting 10 s for a pass under way), then run a last pass."""
        self._stop.set()
        self.join(10)
        self.once()

    def once(self) -> None:
        """Move each source stream's expiry horizon, then demote and age chunks: a stream
        read by instrumented event-queries uses Ananke's horizon ``min W_K - U`` over
        them, one context-queries read their sink watermark less the context window
        (:meth:`_source_horizons`); any other stream its own watermark (U = 0). An event-query's event stream
        follows its watermark, and its context streams too, less the longest archive wait
        and ``after`` of its context-queries (their rows are written that long after the
        watermark passed their event).

        One pass at a time: :meth:`stop` waits 10 s for the background pass, then runs a
        last one, which waits here for a background pass still running (an index build
        of a large chunk) instead of racing it to the same chunks."""
        with self._lock:
            self._pass()

    def _pass(self) -> None:
        horizons = self._source_horizons()
        for name in list(self.sources.by_name):
            h = horizons[name] if name in horizons else self.sources.watermark(name)
            if h is not None:
                self.archiver.demote(h, [name])
        for flow in self.deploy.flows.values():
            wm = flow.horizon()
            if wm is not None:
                self.archiver.demote(wm + flow.U, [flow.stream])
                cqs = self.deploy.contexts.get(flow.query.name, [])
                if cqs:  # context rows carry their event's time, written a worker's wait after it
                    lag = max(cq.after for cq in cqs) + self.settings.spark.trigger * 5 + timedelta(seconds=2)
                    self.archiver.demote(wm + flow.U - lag, [context_stream(flow.query.name, cq.name) for cq in cqs])
        self.archiver.age()
        self._absorb_late()
        edges = [f.graph.e for f in self.deploy.flows.values() if f.graph is not None]
        view = contributing_view(self.db, edges)
        self.archiver.apply_retention(Contributing(view, "source_id") if view else None)
        self.deploy.save_state()

    def _absorb_late(self) -> None:
        """Late rows archived into windows that already alerted join their alerts'
        polynomials (:class:`moirae.retract.late.LateFollower`, H 6)."""
        stores = [f.polys for f in list(self.deploy.flows.values()) if getattr(f, "polys", None) is not None]
        if not stores:
            return
        from moirae.retract.late import WHOLE_EVERY, LateFollower

        if self._late is None:
            def emitted(query: str):
                flow = self.deploy.flows.get(query)
                return flow.emitted_below() if flow is not None else None

            self._late = LateFollower(self.archiver, stores[0], stores[0].plans, emitted)
            # for the heap tuples PostgreSQL places below the moving follower's cursor
            self._late_whole = LateFollower(self.archiver, stores[0], stores[0].plans, emitted, whole=True)
        followers = [self._late] + ([self._late_whole] if self._late_passes % WHOLE_EVERY == 0 else [])
        self._late_passes += 1
        for follower in followers:
            try:
                follower.sweep()
            except Exception as exc:  # noqa: BLE001 - the next pass reads the same rows again
                log.warning("maintenance: absorbing late rows into alert polynomials failed: %s", exc)

    def _source_horizons(self) -> dict[str, Any]:
        """Per source stream: the minimum expiry horizon of the queries reading it;
        streams no query reads are absent (None: a reader has no horizon yet).

        An instrumented event-query contributes its horizon ``W - U`` (A 5.1). A
        context-query contributes ``W - window``, ``W`` its event-query's sink watermark
        (``horizon + U``): every future event is at or after ``W`` and reads the stream
        only within ``window`` before itself (M 3.3), so no older tuple of the stream can
        reach a future context. A stream only context-queries read (a sparse side
        stream) thus leaves the present tier as the event-queries advance, not with its
        own watermark, which stands still once its source has nothing new."""
        out: dict[str, Any] = {}

        def meet(stream: str, h: Any) -> None:
            if stream in out and (out[stream] is None or h is None):
                out[stream] = None
            elif stream in out:
                out[stream] = min(out[stream], h)
            else:
                out[stream] = h

        for flow in self.deploy.flows.values():
            h = flow.horizon()
            for stream in flow.query.inputs:
                meet(stream, h)
            for cq in self.deploy.contexts.get(flow.query.name, []) if h is not None else ():
                for stream in cq.inputs:  # (without a horizon, e.g. no provenance: its own watermark)
                    meet(stream, h + flow.U - cq.window)
        return out

    def _loop(self) -> None:
        period = self.settings.archive.maintenance_interval.total_seconds()
        while not self._stop.wait(period):
            try:
                self.once()
            except Exception as exc:  # keep the job alive; the next round retries
                log.warning("maintenance failed (the next round retries): %s", " ".join(f"{exc}".split()))
