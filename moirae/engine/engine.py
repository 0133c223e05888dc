"""The engine facade: ``from moirae import Engine``.

The CLI, the HTTP API and the console are thin fronts over these methods (through the
read/steer interface :class:`moirae.read.abc.EngineSurface`). The engine only composes
its collaborators, each of which receives the narrow objects it uses:

- :class:`~moirae.ingest.sources.SourceRegistry`: registered sources, their archive
  queries (exactly once: Spark checkpoints plus the Archiver's batch log) and how far
  each is archived (:class:`~moirae.ingest.archive_waits.ArchiveWaits`);
- :class:`~moirae.deploy.manager.DeployManager`: hybrid queries (M 4.2-4.3) and recall;
- :class:`~moirae.engine.maintenance.Maintenance`: expiry horizons, demotion, ageing
  (docs/ARCHITECTURE.md; for a stream no instrumented query reads, its own watermark is
  the horizon, U = 0);
- :class:`~moirae.runtime.supervise.Supervisor`: live queries paused on a full disk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from archive import Archiver, Database, RetentionPolicy
from moirae import config as config_mod
from moirae.config import Settings
from moirae.delivery.router import AlertRouter
from moirae.deploy.lifecycle import named_dsn
from moirae.deploy.manager import DeployManager
from moirae.engine.maintenance import Maintenance
from moirae.engine.metrics import EngineCollector, MetricsTap
from moirae.engine.monitor_methods import MonitorMethods
from moirae.engine.pattern_methods import PatternMethods
from moirae.engine.retract_methods import RetractMethods
from moirae.engine.rule_methods import RuleMethods
from moirae.incidents.rules import follow_window
from moirae.ingest.sources import SourceRegistry
from moirae.materialize.replica import Materializer
from moirae.materialize.replica2 import RawHistory
from moirae.retract.flagged import ArchiveFlags
from moirae.rules.store import DispositionStore
from moirae.runtime.errorlog import log_dir, private_dir
from moirae.runtime.errors import EngineError
from moirae.runtime.metrics import clear_engine_collector, set_engine_collector
from moirae.runtime.spark import spark_session
from moirae.runtime.store import database_dsn
from moirae.runtime.supervise import LiveQuery, Supervisor

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineError"]


class Engine(MonitorMethods, RuleMethods, RetractMethods, PatternMethods):
    """One Moirae engine: a Spark session, an archive, and the live queries on them."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or config_mod.load()
        self.data_dir = Path(self.settings.data_dir).resolve()
        private_dir(self.data_dir)  # 0700: checkpoints, logs, the embedded server, the API token
        self.db = Database(named_dsn(database_dsn(self.settings), self.settings.postgres.schema),
                           schema=self.settings.postgres.schema)
        self.archiver = Archiver(self.db, self.settings.archive.settings())
        self._spark = None
        self.sources = SourceRegistry(self.archiver, self.settings, self.data_dir)
        self.deploy = DeployManager(self.settings, self.db, self.archiver, self.sources, lambda: self.spark)
        # recall tasks out of materialized history go on over the raw archive (M 4.4, replica2)
        self.deploy.manager.set_replica(RawHistory(self.deploy.materializer))
        # re-runs and history-queries apply the retractions (moirae.retract.flagged)
        self.deploy.materializer.flags = self.archiver.row_flags = ArchiveFlags(self.db)
        self.maintenance = Maintenance(self.settings, self.db, self.archiver, self.sources, self.deploy)
        self.supervisor = Supervisor(self.data_dir, self._live_queries)
        # alerts out (moirae.delivery) and the engine's own metrics (GET /metrics)
        self.alerts = AlertRouter(self.deploy.manager.bus, self.deploy.results, self.deploy.incidents, self.db,
                                  console_url=_console_url(self.settings.api))
        self._metrics = EngineCollector(lambda: self._spark.streams.active if self._spark is not None else [],
                                        self.archiver.status, self.sources.waits, self.deploy.manager.tasks,
                                        lambda: list(self.deploy.alert_latencies), self.db.health)
        self._metrics_tap = MetricsTap(self.deploy.manager.bus)
        self._stop = threading.Event()
        self._rules = None  # the rules over Recall results, made by the first (moirae.rules)
        self.deploy.lifecycle.on_retire = self._retire_attached
        # made with the engine's other tables, so a read (GET /api/events) creates nothing
        self._dispositions = DispositionStore(self.db)
        self._supervising: threading.Thread | None = None
        self._closed = False

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

    @property
    def materializer(self) -> Materializer:
        """Materialization of the deployed event-queries' histories (``moirae rematerialize``)."""
        return self.deploy.materializer

    @property
    def started(self) -> bool:
        return self.sources.started

    def checkpoint_dir(self, name: str) -> Path:
        """Where the streaming query of ``name`` keeps its checkpoint (per schema and scenario)."""
        return self.sources.checkpoint_dir(name)

    # -- sources ---------------------------------------------------------------------

    def source(self, name: str, df, ts: str, lateness: str = "10 seconds", indexes=(),
               retention: RetentionPolicy | None = None, sparse: bool = False, shared_read: bool | None = None):
        """Register a streaming DataFrame as the archived source stream ``name``, with
        event-time column ``ts`` and an allowed lateness (its watermark delay). Returns
        the DataFrame with its watermark, for event-queries to build on.

        ``sparse``: the source may have nothing new for a while but never lags the other
        sources (what it delivers by an instant covers every event time up to the other
        sources' at that instant). Waits for its archive then end as soon as a trigger
        of its archive query finds nothing new (:mod:`moirae.runtime.idle`), instead of waiting
        out their timeout when its offsets stand still (Kafka, files, a bounded replay at
        its end). Leave it off for an input that may arrive late: the wait is what lets
        its late rows into contexts.

        ``shared_read``: whether the first event-query deployed on the source archives it
        in its own read (:mod:`archive.shared`; default: ``archive.shared_read``). False
        gives the source its own archive query, and each event-query reads it again: for
        a source that is cheap to read and replayable (every read yields the same tuples:
        Kafka, files, Spark's ``rate`` source with an event time derived from ``value``),
        where a second read may cost less than each row's hop through the archive's
        Python writer and back into the query's plan. A source that is not
        replayable must be read once (the default), or the event-query's provenance names
        tuples the archive never held."""
        return self.sources.register(name, df, ts, lateness, indexes, retention, sparse, shared_read)

    def watermark(self, name: str) -> datetime | None:
        """The source's current watermark (the last one seen, once its query has stopped)."""
        return self.sources.watermark(name)

    def wait_archived(self, streams, ts: datetime, timeout: float, why: str = "",
                      since: float | None = None) -> bool:
        """Block until ``streams`` are archived up to ``ts`` or ``timeout`` passes
        (:meth:`moirae.ingest.archive_waits.ArchiveWaits.wait`)."""
        return self.sources.waits.wait(streams, ts, timeout, why, since)

    # -- hybrid queries (M 3), deployed by the Deploy Manager (M 4.2) -------------------

    def event_query(self, name: str, fn, inputs, eid: str = "eid", ts: str = "ts"):
        """Deploy an event-query (M 3.1): ``fn(*instrumented inputs)`` returns the
        instrumented stream of events with columns ``eid`` and ``ts``. May be called while
        the engine runs (M 4.2). Its incidents follow its own window
        (:mod:`moirae.incidents.rules`)."""
        q = self.deploy.event_query(name, fn, inputs, eid, ts)
        follow_window(self.deploy.incidents, self.archiver, self.deploy.flows[name])
        return q

    def context_query(self, event_name: str, fn, inputs=None, name: str | None = None, window="5m",
                      surrounding: bool = False, after=0):
        """Attach a context-query (M 3.3) to an event-query: ``fn(events, *inputs)``
        returns ``(eid, ts, attrs...)`` tuples describing each event. ``fn`` may instead
        be SQL text over the relation ``events`` and archived streams, run as one
        PostgreSQL read per batch (:mod:`moirae.queries.context_sql`); its inputs are the
        streams it reads. SQL may also read reference tables (:meth:`reference_table`)."""
        from moirae.queries.context_sql import references_visible

        with references_visible(self.archiver.references.names()):
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

    def route_alerts(self, event_query: str, targets) -> list:
        """Send the alerts of ``event_query`` to ``targets``: webhooks (HMAC-signed JSON
        or Slack's payload) and Prometheus Alertmanagers, each carrying the top similar
        past incidents, their resolutions and a console link; resolved when the incident
        is (:mod:`moirae.delivery`; targets as :func:`moirae.delivery.targets.parse_targets`
        takes them). Replaces the query's previous targets."""
        return self.alerts.route(event_query, targets)

    def live_status(self) -> dict[str, Any]:
        """The live path's own health: archive waits (count, time, timeouts per stream) and
        how far each source is archived."""
        return {**self.sources.waits.status(), **self.deploy.live_status(), "queries": self.supervisor.status()}

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Engine:
        if self.started:
            return self
        for src in self.sources:
            self.sources.start(src)
        self.alerts.start()  # subscribed before the first event can be published
        self._metrics_tap.start()
        set_engine_collector(self._metrics)
        self.deploy.start()
        self.sources.started = True
        self._stop.clear()
        self.maintenance.start()
        self._supervising = threading.Thread(target=self._supervise, name="moirae-supervisor", daemon=True)
        self._supervising.start()
        if self.deploy.lifecycle.table.rows():  # the monitors deployed before the restart come back
            self.deploy.lifecycle.restore(self._loaded)
        return self

    def run_for(self, seconds: float | None) -> None:
        """Block until ``seconds`` pass (None: until a query fails or Ctrl-C). A query
        stopped by a full data directory is not a failure: it is paused and resumed
        (:mod:`moirae.runtime.supervise`)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while deadline is None or time.monotonic() < deadline:
            failed = self.supervisor.check()
            for src in self.sources:
                if f"archive_{src.name}" in failed:
                    raise EngineError(f"live query of source {src.name!r} failed: {failed[f'archive_{src.name}']} "
                                      f"(details in {log_dir(self.data_dir) / 'spark.log'})")
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))

    def _live_queries(self) -> list[LiveQuery]:
        """The live streaming queries now, for the supervisor."""
        return [*self.sources.live_queries(), *self.deploy.live_queries()]

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.supervisor.check()
            except Exception as exc:  # keep watching; the next round retries
                log.warning("moirae: supervising the live queries failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self.maintenance.request_stop()
        if self._supervising is not None:  # first: it must not restart a query being stopped
            self._supervising.join(timeout=10)
        self.supervisor.reset()  # stopped: nothing to resume; the next start's queries are new
        for name in self.sources.by_name:
            self.sources.watermark(name)  # remember the last watermarks before the queries go
        try:
            self.deploy.stop()  # every event-query is tried; a failed stop is raised after the rest below
        finally:
            # the Recall Manager's periodic jobs stop with the engine (start runs them again): left
            # running, a job falling due while the interpreter exits was submitted to a pool already
            # shut down, an APScheduler traceback on stderr (recall/periodic.py)
            self.deploy.periodic.shutdown()
            self.sources.stop(self.settings.spark.stop_grace.total_seconds())
            self.maintenance.stop()
            self.alerts.stop()
            self._metrics_tap.stop()
            clear_engine_collector(self._metrics)
            self.sources.started = False

    def close(self) -> None:
        """Stop (if started) and release everything: recall, connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.started:
                self.stop()
        finally:  # a failed stop (raised) still releases everything
            if self._rules is not None:
                self._rules.close()
            try:
                self.deploy.close()
            finally:
                self.archiver.close()

    # -- maintenance -----------------------------------------------------------------

    def maintain_once(self) -> None:
        """One maintenance pass (:meth:`moirae.engine.maintenance.Maintenance.once`)."""
        self.maintenance.once()

    def status(self) -> dict[str, Any]:
        return {**self.archiver.status(), "live": self.live_status()}

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the fronts' surface (moirae.read.abc.EngineSurface; cancel, accelerate above) --

    @property
    def events(self):
        """The event log."""
        return self.deploy.events

    @property
    def results(self):
        """The recall results table."""
        return self.deploy.results

    @property
    def incidents(self):
        """The incident store."""
        return self.deploy.incidents

    @property
    def bus(self):
        """The Recall Manager's bus: new events, recall outputs, incident updates."""
        return self.deploy.manager.bus

    @property
    def archive(self):
        """The archive (its reads: chunks, streams, tuples, status)."""
        return self.archiver

    def steerable(self) -> bool:
        return True

    def tasks(self, eid: str | None = None) -> list:
        """The Recall Manager's tasks (of ``eid``, or all)."""
        return self.deploy.manager.tasks(eid)

    def scheduler_state(self) -> dict[str, Any]:
        m = self.deploy.manager
        return {"running_queries": m.running(), "max_concurrent": m.max_concurrent, "open_events": m.open_events()}

    def similarity_operators(self) -> set[str]:
        return {d.operator for d in self.deploy.manager.descriptions()
                if "Similarity" in type(d.recall_operator).__name__}

    def provenance_graph(self, event: str):
        flow = self.deploy.flows.get(event)
        return None if flow is None else flow.graph

    def event_inputs(self, event: str) -> tuple[str, list[str]] | None:
        eq = self.deploy.event_queries.get(event)
        return None if eq is None else (eq.eid, list(eq.inputs))

    def alert_latencies(self) -> list[float]:
        """Seconds from each alert to its first history result, so far."""
        return list(self.deploy.alert_latencies)

    @property
    def index_builds(self):
        """The background builder of similarity indexes (``pending``, ``drain``, ``built``, ``failed``)."""
        return self.deploy.indexes


def _console_url(api) -> str:
    """The console's base URL as this engine serves it (links in delivered alerts)."""
    host = api.host if api.host not in ("0.0.0.0", "::") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if api.tls_cert else 'http'}://{host}:{api.port}"
