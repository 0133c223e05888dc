"""The engine facade: ``from moirae import Engine`` (DESIGN.md §5).

The CLI, the HTTP API and the console are thin fronts over these methods.

Sources are registered with :meth:`Engine.source`; :meth:`Engine.start` starts one
streaming query per source that archives it (exactly once: Spark checkpoints under the
data directory plus the Archiver's batch log), and a maintenance job that moves the
expiry horizon of each stream and demotes and ages chunks (DESIGN.md §3: for a stream
no instrumented query reads, its own watermark is the horizon, U = 0).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from archive import Archiver, Contributing, Database, RetentionPolicy
from archive.shared import MARKER, SharedArchive, claim, record_claim, recorded_owner
from archive.spark_sink import archive_batches, archive_layout, prepare_batch, spec_from_spark_schema
from moirae import config as config_mod
from moirae.config import Settings
from moirae.deploy import DeployManager
from moirae.errorlog import log_dir
from moirae.graceful_stop import stop_between_batches
from moirae.hybrid import context_stream
from moirae.idle import idle_tick, tick_ms
from moirae.persist import contributing_view
from moirae.spark import spark_session
from moirae.store import database_dsn
from moirae.supervise import LiveQuery, Supervisor
from moirae.base.errors import MoiraeError

log = logging.getLogger(__name__)

#: how often a wait asks Spark whether a lagging sparse source's archive query is idle
IDLE_POLL_S = 0.05
#: how late after its tick a trigger may start (the status before it is not yet its own)
IDLE_SLACK_S = 0.25

class EngineError(MoiraeError, RuntimeError):
    """An engine operation that cannot be done in the engine's current state."""


@dataclass
class _Source:
    name: str
    df: Any
    ts: str
    lateness: str
    payload: list[str]
    archived: Any = None  # the DataFrame the archive query writes (archive_layout: no per-batch projection)
    query: Any = None
    last_watermark: datetime | None = None
    layout: Any = None  # archive_layout without the watermark (a shared read's plan starts from it)
    shared_by: str | None = None  # the event-query whose read archives this source (archive.shared)
    sparse: bool = False  # never lags the other inputs: an idle trigger means caught up (moirae.idle)
    started: float = float("inf")  # wall time its archive query started


class Engine:
    """One Moirae engine: a Spark session, an archive, and the live queries on them."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or config_mod.load()
        self.data_dir = Path(self.settings.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        dsn = database_dsn(self.settings)
        self.db = Database(dsn, schema=self.settings.postgres.schema)
        self.archiver = Archiver(self.db, self.settings.archive.settings())
        self._spark = None
        self._sources: dict[str, _Source] = {}
        self._stop = threading.Event()
        self._maintenance: threading.Thread | None = None
        self._maintaining = threading.Lock()  # one maintenance pass at a time (see maintain_once)
        self.started = False
        self._archived_upto: dict[str, datetime] = {}
        self._archived_cond = threading.Condition()
        self._waiting: dict[object, tuple[datetime, list[str]]] = {}
        self._empty_batch: dict[str, bool] = {}
        self._caught_up: dict[str, float] = {}  # stream -> start (wall s) of its last empty archive batch
        self.waits = {"count": 0, "timed_out": 0, "caught_up_idle": 0, "seconds": 0.0, "timeouts_by_stream": {}}
        self.deploy = DeployManager(self)
        self.supervisor = Supervisor(self.data_dir, self._live_queries)
        self._supervising: threading.Thread | None = None

    @classmethod
    def from_config(cls, path: str | os.PathLike | None = None, **overrides: Any) -> Engine:
        """An engine from a YAML file merged over ``config/moirae.yaml``; keyword
        overrides are nested dicts, e.g. ``archive={"chunk_span": "10m"}``."""
        return cls(config_mod.load(path, overrides or None))

    @property
    def spark(self):
        if self._spark is None:
            s = self.settings.spark
            # Spark's temporary files and its log live in the data directory, beside the
            # checkpoints (a new session's only: a running one keeps its own)
            self._spark = spark_session(s.master, "moirae", s.ui, s.shuffle_partitions,
                                        extra={"spark.local.dir": str(self.data_dir / "spark-tmp")},
                                        log_file=log_dir(self.data_dir) / "spark.log")
        return self._spark

    def checkpoint_dir(self, name: str) -> Path:
        """Where the streaming query of ``name`` keeps its checkpoint: per database schema
        and scenario, since a checkpoint only resumes the source it was written for."""
        s = self.settings
        return self.data_dir / "checkpoints" / s.postgres.schema / s.scenario / name

    # -- sources ---------------------------------------------------------------------

    def source(self, name: str, df, ts: str, lateness: str = "10 seconds", indexes=(),
               retention: RetentionPolicy | None = None, sparse: bool = False):
        """Register a streaming DataFrame as the archived source stream ``name``, with
        event-time column ``ts`` and an allowed lateness (its watermark delay). Returns
        the DataFrame with its watermark, for event-queries to build on.

        ``sparse``: the source may have nothing new for a while but never lags the other
        sources (what it delivers by an instant covers every event time up to the other
        sources' at that instant). Waits for its archive then end as soon as a trigger
        of its archive query finds nothing new (:mod:`moirae.idle`), instead of waiting
        out their timeout when its offsets stand still (Kafka, files, a bounded replay at
        its end). Leave it off for an input that may arrive late: the wait is what lets
        its late rows into contexts."""
        if name in self._sources:
            raise EngineError(f"source {name!r} is already registered")
        if not df.isStreaming:
            raise EngineError(f"source {name!r} must be a streaming DataFrame (spark.readStream...)")
        spec = spec_from_spark_schema(name, df.schema, ts, indexes=indexes, retention=retention)
        spec = self.archiver.register_stream(spec)
        # Cast to the archive's types first, so Ananke's source ids (hashed over these
        # columns in the live query) equal the ids the Archiver stores.
        typed = prepare_batch(df, spec).drop("_sid")
        watermarked = typed.withWatermark(ts, lateness)
        layout = archive_layout(df, spec)
        self._sources[name] = _Source(name, watermarked, ts, lateness, list(spec.columns),
                                      layout.withWatermark(ts, lateness), layout=layout, sparse=sparse)
        if self.started:
            self._start_source(self._sources[name])
        return watermarked

    def shared_input(self, name: str, owner: str):
        """The source ``name`` read through its archive's partition writers, for event-query
        ``owner`` to build on, with the :class:`archive.shared.SharedArchive` that owner's
        batches drive; None when the source keeps its own archive query (``archive.shared_read``
        off, the engine already started, another event-query claimed it first, or its
        checkpoint says it was archived otherwise before). The first event-query deployed
        on a source claims it; one deployed after it reads the source a second time, as
        every event-query did before. See :mod:`archive.shared`."""
        src = self._sources[name]
        if (not self.settings.archive.shared_read or self.started or src.query is not None
                or src.shared_by is not None or claim(self.checkpoint_dir(name), owner) is not None):
            return None
        shared = SharedArchive(self.archiver, name, owner)
        df = shared.plan(src.layout).drop("_sid").select(*src.df.columns).withWatermark(src.ts, src.lateness)
        record_claim(self.checkpoint_dir(name), owner)
        src.shared_by = owner
        return df, shared

    def release_shared(self, name: str, owner: str) -> None:
        """Undo :meth:`shared_input` for an event-query that was not deployed after all."""
        src = self._sources.get(name)
        if src is not None and src.shared_by == owner:
            src.shared_by = None
            (self.checkpoint_dir(name) / MARKER).unlink(missing_ok=True)

    def shared_committed(self, name: str, result, started: float | None) -> None:
        """An event-query committed its micro-batch of the shared source ``name``."""
        self._archived(name, result)
        self._batch_done(name, started if started is not None else time.time())

    def _start_source(self, src: _Source) -> None:
        if src.shared_by is not None:  # archived by its event-query's read
            return
        other = recorded_owner(self.checkpoint_dir(src.name))
        if other is not None:
            raise EngineError(f"source {src.name!r} was archived by the read of event-query {other!r} "
                              f"({self.checkpoint_dir(src.name) / MARKER}); deploy {other!r} again with "
                              "archive.shared_read on, so the archive goes on where it stopped")
        trigger = f"{int(self.settings.spark.trigger.total_seconds() * 1000)} milliseconds"
        write = archive_batches(self.archiver, src.name, on_batch=lambda res, _df, n=src.name: self._archived(n, res))

        def batch(df, batch_id: int, n: str = src.name) -> None:
            started = time.time()  # wall clock: Spark's triggers are aligned to it
            write(df, batch_id)
            self._batch_done(n, started)

        src.started = time.time()
        src.query = (src.archived.writeStream.queryName(f"archive_{src.name}")
                     .foreachBatch(batch)
                     .option("checkpointLocation", str(self.checkpoint_dir(src.name)))
                     .trigger(processingTime=trigger).start())

    # -- hybrid queries (M 3), deployed by the Deploy Manager (M 4.2) -------------------

    def event_query(self, name: str, fn, inputs, eid: str = "eid", ts: str = "ts"):
        """Deploy an event-query (M 3.1): ``fn(*instrumented inputs)`` returns the
        instrumented stream of events with columns ``eid`` and ``ts``. May be called while
        the engine runs (M 4.2)."""
        return self.deploy.event_query(name, fn, inputs, eid, ts)

    def context_query(self, event_name: str, fn, inputs=None, name: str | None = None, window="5m",
                      surrounding: bool = False, after=0):
        """Attach a context-query (M 3.3) to an event-query: ``fn(events, *inputs)``
        returns ``(eid, ts, attrs...)`` tuples describing each event. ``fn`` may instead
        be SQL text over the relation ``events`` and archived streams, run as one
        PostgreSQL read per batch (:mod:`moirae.context_sql`); its inputs are the
        streams it reads."""
        return self.deploy.context_query(event_name, fn, inputs, name, window, surrounding, after)

    def recall(self, event_name: str, sql: str, name: str | None = None, **kwargs):
        """Attach a Recall (M 3.2): a history-query template run chunk by chunk for each event."""
        return self.deploy.recall(event_name, sql, name, **kwargs)

    def similarity_recall(self, event_name: str, k: int | None = None, name: str | None = None, **kwargs):
        """Attach a Similarity Recall (M 3.4): the k past events of the same type with the
        most similar context."""
        return self.deploy.similarity_recall(event_name, k, name, **kwargs)

    def cancel(self, eid: str):
        """Cancel every recall task of an event (M 4.4) and its running SQL; returns how
        many tasks were cancelled. Once it returns, the event's end is committed: a
        restart does not resume its recall."""
        with self.deploy.events.deferred():
            return self.deploy.manager.cancel(eid)

    def cancel_many(self, eids) -> dict[str, int]:
        """Cancel the recall of several events at once (a cancel storm, M 4.4): their
        tasks leave the scheduler in one pass, every running query of theirs is cancelled,
        and their ends are committed in one statement. Returns the number of cancelled
        tasks per event that had any open."""
        with self.deploy.events.deferred():
            return self.deploy.manager.cancel_many(list(eids))

    def accelerate(self, eid: str, tickets: int = 100):
        """Give every recall task of an event more tickets (M 4.4)."""
        return self.deploy.manager.accelerate(eid, tickets)

    def _on_events(self, flow, frame, batch_id: int, replay: bool, started: float | None = None) -> None:
        self.deploy.on_events(flow, frame, batch_id, replay, started)

    def _archived(self, name: str, result) -> None:
        with self._archived_cond:
            if result.rows == 0 and not result.duplicate:
                self._empty_batch[name] = True
            if result.max_ts is None:
                return
            prev = self._archived_upto.get(name)
            if prev is None or result.max_ts > prev:
                self._archived_upto[name] = result.max_ts
            self._archived_cond.notify_all()

    def _batch_done(self, name: str, started: float) -> None:
        """A source's archive batch that began at ``started`` (wall s) committed; an
        empty one means the source had nothing more to give at that instant (caught up)."""
        with self._archived_cond:
            if self._empty_batch.pop(name, False):
                self._caught_up[name] = started
            self._archived_cond.notify_all()

    def wait_archived(self, streams, ts: datetime, timeout: float, why: str = "",
                      since: float | None = None) -> bool:
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
        new at such a tick (:meth:`_probe_idle`). A wait
        that times out is logged and counted per lagging stream (:meth:`live_status`);
        the caller goes on with what is archived."""
        live = [s for s in dict.fromkeys(streams)
                if s in self._sources and (self._sources[s].query is not None or self._sources[s].shared_by)]
        t0 = time.monotonic()
        wall0 = time.time()

        def caught_up(s: str) -> bool:
            began = self._caught_up.get(s)
            if began is None:
                return False
            return began >= wall0 if since is None else self._tick(began) >= self._tick(since)

        def lagging() -> list[str]:
            return [s for s in live if (self._archived_upto.get(s) is None or self._archived_upto[s] < ts)
                    and not caught_up(s)]

        probe = [s for s in live if self._sources[s].sparse]
        deadline = t0 + timeout
        token = object()
        with self._archived_cond:
            self._waiting[token] = (ts, lagging())
            try:
                while (late := lagging()) and (left := deadline - time.monotonic()) > 0:
                    asked = [s for s in late if s in probe]
                    if asked:  # Spark's status, outside the lock the archive callbacks take
                        self._archived_cond.release()
                        try:
                            self._probe_idle(asked)
                        finally:
                            self._archived_cond.acquire()
                    self._archived_cond.wait_for(lambda: not lagging(), min(left, IDLE_POLL_S) if asked else left)
            finally:
                del self._waiting[token]
            ok = not late
            idle = [s for s in live if s not in late and (self._archived_upto.get(s) is None
                                                           or self._archived_upto[s] < ts)]
            self.waits["caught_up_idle"] += len(idle)
            self.waits["count"] += 1
            self.waits["seconds"] += time.monotonic() - t0
            if late:
                self.waits["timed_out"] += 1
                for s in late:
                    self.waits["timeouts_by_stream"][s] = self.waits["timeouts_by_stream"].get(s, 0) + 1
        if late:
            log.warning("moirae: waited %.1f s for %s to be archived up to %s%s; going on without their "
                        "latest rows (archived up to %s)", timeout, late, ts.isoformat(), f" ({why})" if why else "",
                        {s: str(self._archived_upto.get(s)) for s in late})
        return ok

    def _archive_query(self, src: _Source):
        """The streaming query that archives ``src`` and the wall time it started: its own
        archive query, or the event-query whose read archives it (:mod:`archive.shared`);
        (None, inf) when neither runs."""
        if src.shared_by is None:
            return src.query, src.started
        flow = self.deploy.flows.get(src.shared_by)
        if flow is None or flow.streaming is None:
            return None, float("inf")
        return flow.streaming, flow.started

    def _probe_idle(self, names: list[str]) -> None:
        """Mark the sparse sources among ``names`` whose archive query found nothing new
        at a trigger tick as caught up at that tick (:func:`moirae.idle.idle_tick`). A
        source an event-query's read archives is probed through that query: a trigger of
        it that found nothing new found nothing in any of its inputs, and each batch
        commits the shared inputs' rows before it ends."""
        interval = self.settings.spark.trigger.total_seconds()
        for name in names:
            query, started = self._archive_query(self._sources[name])
            if query is None:
                continue
            try:
                tick = idle_tick(query, started, interval, time.time(), max(IDLE_SLACK_S, interval / 2))
            except Exception as e:  # noqa: BLE001 - a stopped query, a JVM gone: wait as without the probe
                log.debug("moirae: could not read the status of %s's archive query: %s", name, e)
                continue
            if tick is None:
                continue
            with self._archived_cond:
                if tick > self._caught_up.get(name, float("-inf")):
                    self._caught_up[name] = tick
                    self._archived_cond.notify_all()

    def _tick(self, wall: float) -> int:
        """The trigger tick (ms, a multiple of the trigger interval) a batch begun at
        ``wall`` (epoch s) belongs to."""
        return tick_ms(wall, self.settings.spark.trigger.total_seconds())

    def live_status(self) -> dict[str, Any]:
        """The live path's own health: archive waits (count, time, timeouts per stream) and
        how far each source is archived."""
        with self._archived_cond:
            waits = {**self.waits, "seconds": round(self.waits["seconds"], 3),
                     "timeouts_by_stream": dict(self.waits["timeouts_by_stream"])}
            upto = {s: t.isoformat() for s, t in self._archived_upto.items()}
            waits["now"] = [{"until": ts.isoformat(), "streams": streams} for ts, streams in self._waiting.values()]
        flows = {n: {"events": f.events_seen, "seconds": f.timings(),
                     **({"window_provenance": f.resolver.status()} if f.resolver is not None else {})}
                 for n, f in self.deploy.flows.items()}
        disk = self.supervisor.status()
        w = self.deploy.worker
        worker = {"running": w.running, "pending_batches": w.pending(), "batches": w.batches, "errors": w.errors,
                  "last_error": w.last_error}
        return {"archive_waits": waits, "archived_upto": upto, "event_queries": flows, "event_worker": worker,
                "queries": disk}

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Engine:
        if self.started:
            return self
        for src in self._sources.values():
            self._start_source(src)
        self.deploy.start()
        self.started = True
        self._stop.clear()
        self._maintenance = threading.Thread(target=self._maintain, name="moirae-maintenance", daemon=True)
        self._maintenance.start()
        self._supervising = threading.Thread(target=self._supervise, name="moirae-supervisor", daemon=True)
        self._supervising.start()
        return self

    def run_for(self, seconds: float | None) -> None:
        """Block until ``seconds`` pass (None: until a query fails or Ctrl-C). A query
        stopped by a full data directory is not a failure: it is paused and resumed
        (:mod:`moirae.supervise`)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while deadline is None or time.monotonic() < deadline:
            failed = self.supervisor.check()
            for src in self._sources.values():
                if f"archive_{src.name}" in failed:
                    raise EngineError(f"live query of source {src.name!r} failed: {failed[f'archive_{src.name}']} "
                                      f"(details in {log_dir(self.data_dir) / 'spark.log'})")
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))

    def _live_queries(self) -> list[LiveQuery]:
        """The live streaming queries now, for the supervisor."""
        out = [LiveQuery(f"archive_{src.name}", src.query, self.checkpoint_dir(src.name),
                         lambda src=src: self._start_source(src)) for src in self._sources.values()
               if src.shared_by is None]
        for flow in self.deploy.flows.values():
            restart = lambda flow=flow: self.deploy.restart_flow(flow)  # noqa: E731
            out.append(LiveQuery(f"event_{flow.query.name}", flow.streaming, self.checkpoint_dir(flow.stream),
                                 restart))
            if flow.ankn_streaming is not None:
                out.append(LiveQuery(f"ankn_{flow.query.name}", flow.ankn_streaming,
                                     Path(f"{self.checkpoint_dir(flow.stream)}-ankn"), restart))
        return out

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.supervisor.check()
            except Exception as exc:  # keep watching; the next round retries
                log.warning("moirae: supervising the live queries failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._supervising is not None:  # first: it must not restart a query being stopped
            self._supervising.join(timeout=10)
        self.supervisor.reset()  # stopped: nothing to resume; the next start's queries are new
        for name in self._sources:
            self.watermark(name)  # remember the last watermarks before the queries go
        self.deploy.stop()
        grace = self.settings.spark.stop_grace.total_seconds()
        for src in self._sources.values():
            if src.query is not None:
                stop_between_batches(src.query, grace)
                src.query = None
        if self._maintenance is not None:
            self._maintenance.join(timeout=10)
        self.maintain_once()
        self.started = False

    def close(self) -> None:
        """Stop (if started) and release everything: recall, connections. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if self.started:
            self.stop()
        self.deploy.close()
        self.archiver.close()

    # -- maintenance -----------------------------------------------------------------

    def watermark(self, name: str) -> datetime | None:
        """The source's current watermark from its streaming query's progress (the last
        one seen, once the query has stopped)."""
        src = self._sources.get(name)
        if src is None:
            return None
        query = self._archive_query(src)[0]  # a shared source: the event-query's watermark
        if query is not None and query.lastProgress is not None:
            wm = (query.lastProgress.get("eventTime") or {}).get("watermark")
            if wm:
                ts = datetime.fromisoformat(wm.replace("Z", "+00:00"))
                if ts.year > 1970 and (src.last_watermark is None or ts > src.last_watermark):
                    src.last_watermark = ts
        return src.last_watermark

    def maintain_once(self) -> None:
        """Move each source stream's expiry horizon, then demote and age chunks
        (DESIGN.md §3): a stream read by instrumented event-queries uses Ananke's horizon
        ``min W_K - U`` over them; any other stream its own watermark (U = 0). An
        event-query's event stream follows its watermark, and its context streams too,
        less the longest archive wait and ``after`` of its context-queries (their rows
        are written that long after the watermark passed their event).

        One pass at a time: :meth:`stop` waits 10 s for the background pass, then runs a
        last one, which waits here for a background pass still running (an index build
        of a large chunk) instead of racing it to the same chunks."""
        with self._maintaining:
            self._maintain_pass()

    def _maintain_pass(self) -> None:
        horizons = self.deploy.horizons()
        for name in list(self._sources):
            h = horizons[name] if name in horizons else self.watermark(name)
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
        edges = [f.graph.e for f in self.deploy.flows.values() if f.graph is not None]
        view = contributing_view(self.db, edges)
        self.archiver.apply_retention(Contributing(view, "source_id") if view else None)
        self.deploy.save_state()

    def _maintain(self) -> None:
        period = self.settings.archive.maintenance_interval.total_seconds()
        while not self._stop.wait(period):
            try:
                self.maintain_once()
            except Exception as exc:  # keep the job alive; the next round retries
                log.warning("maintenance failed (the next round retries): %s", " ".join(f"{exc}".split()))

    def status(self) -> dict[str, Any]:
        return {**self.archiver.status(), "live": self.live_status()}

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
