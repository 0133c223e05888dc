"""The Deploy Manager (M 4.2-4.3): deploys hybrid queries on a running engine.

- *Archive inference* (M 4.1-4.2): raw sources are archived by the engine; the events
  of every event-query and the tuples of every context-query are archived as
  intermediate streams (``ev_<event>``, ``cx_<event>_<name>``), because Similarity
  Recall re-reads them and replicas re-create them.
- Recall operators (M 3.2, 3.4) are registered with the Recall Manager; for each new
  event the Deploy Manager computes its context, records it, and submits one recall
  task per operator attached to its event-query.
- The Recall Manager's outputs are stored (``moirae_recall_outputs``) and published on
  the bus the API and console subscribe to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from archive import Archiver, Database
from moirae.config import Settings
from moirae.deploy.lifecycle import Lifecycle
from moirae.deploy.processing import Deployed, EventProcessor
from moirae.incidents.store import IncidentConfig, IncidentStore
from moirae.ingest.event_worker import EventWorker, unlogged_events
from moirae.ingest.events import EventLog
from moirae.ingest.live import EventFlow
from moirae.ingest.persist import forget_learned, load_similarity, save_operator
from moirae.ingest.sources import SourceRegistry
from moirae.materialize.replica import Materializer, ReplicaOperator, replica_event
from moirae.materialize.unit_inputs import UnitLedger
from moirae.queries import context_sql
from moirae.queries.context import context_spec
from moirae.queries.hybrid import ContextQuery, EventQuery, QueryDefinitionError, check_name, context_stream
from moirae.runtime.supervise import LiveQuery
from recall.api import OutputKind
from recall.manager import RecallManager
from recall.operator import Recall
from recall.outputs import StoredOutputs
from recall.periodic import PeriodicJobs
from recall.similarity_prebuild import IndexPrebuilder
from scheduler.config import SchedulerConfig
from scheduler.scheduler import StrideScheduler

log = logging.getLogger(__name__)


class DeployManager:
    def __init__(self, settings: Settings, db: Database, archiver: Archiver, sources: SourceRegistry,
                 spark: Callable[[], Any]) -> None:
        self.settings = settings
        self.db = db
        self.archiver = archiver
        self.sources = sources
        self.spark = spark  # the engine's session, made on first use
        rc = settings.recall
        self.scheduler = StrideScheduler(SchedulerConfig(
            default_tickets=rc.default_tickets, min_tickets=rc.min_tickets,
            tickets_per_result=rc.tickets_per_result, light_load=rc.materialization_load_threshold,
            feedback_period=rc.feedback_period, feedback_timeout=rc.feedback_timeout.total_seconds()))
        self.results = StoredOutputs(db)
        self.events = EventLog(db)
        self.manager = RecallManager(
            archiver, self.scheduler, max_concurrent=rc.max_concurrent,
            on_output=[self.results.append, self._on_output],
            timeout_ms=settings.archive.settings().statement_timeout_ms)
        self.incidents = IncidentStore(db, publish=self.manager.bus.publish, events=self.events)
        self.events.listeners.append(self.incidents.record)
        self.deployed = Deployed()
        d = self.deployed  # the same dicts, by their names
        self.event_queries, self.flows, self.contexts, self.operators, self.ops = (
            d.event_queries, d.flows, d.contexts, d.operators, d.ops)
        self.alert_latencies: list[float] = []
        self.processor = EventProcessor(archiver, spark, sources.waits, settings.spark.trigger.total_seconds(), d,
                                        self.events, self.manager)
        self.worker = EventWorker(self.processor.process, many=self.processor.process_many)
        # discards the tasks of events left without feedback past recall.feedback_timeout
        # (M 4.4) and forgets ended tasks' statistics: without it suspended tasks stay open
        self.periodic = PeriodicJobs(self.manager)
        self.units = UnitLedger()  # what each materialized unit was computed from (moirae.materialize.unit_inputs)
        self.materializer = Materializer(archiver, spark, sources, d, self.units, self.processor.on_materialized)
        self.indexes = IndexPrebuilder()  # similarity indexes of sealed / materialized chunks, in the background
        self._lock = threading.Lock()
        self._closing = False
        self.deploying: tuple[str, str] | None = None  # (monitor, version) whose apply runs now
        self.resumed: set[str] = set()  # monitors' event-queries that go on from their own version's checkpoint
        self.lifecycle = Lifecycle(self, sources, db, settings.spark.stop_grace.total_seconds())

    # -- deployment ------------------------------------------------------------------

    def event_query(self, name: str, fn, inputs, eid: str = "eid", ts: str = "ts") -> EventQuery:
        check_name("event-query", name)
        if name in self.event_queries:
            raise QueryDefinitionError(f"event-query {name!r} is already deployed")
        inputs = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        q = EventQuery(name, fn, inputs, eid, ts)
        flow = EventFlow(q, sources=self.sources, archiver=self.archiver, db=self.db, ananke=self.settings.ananke,
                         spark=self.settings.spark, on_events=self.on_events, provenance=self.settings.ananke.enabled)
        self.event_queries[name] = q
        self.flows[name] = flow
        if self.deploying is not None:  # its events say which monitor version raised them
            self.deployed.monitor_of[name] = self.deploying
            self._claim_checkpoint(flow, self.deploying[1])
        self.operators.setdefault(name, [])
        self.manager.register(ReplicaOperator(self.materializer, name, self.settings.recall.default_tickets))
        if self.sources.started:
            self._start_flow(flow)
            self.materialize_recent(name)
        return q

    def materialize_recent(self, name: str) -> str | None:
        """Submit the low-priority replica task re-creating ``name``'s present and recent
        history (M 4.2); None when there is no raw history yet."""
        if not self.materializer.raw_chunks(name):
            return None
        return self.manager.submit(replica_event(name), [f"replica_{name}"])[0]

    def context_query(self, event: str, fn, inputs=None, name: str | None = None, window: timedelta | str = "5m",
                      surrounding: bool = False, after: timedelta | str = 0) -> ContextQuery:
        """``fn`` is a Spark function ``(events, *inputs)`` or SQL text over ``events`` and
        archived streams (:mod:`moirae.queries.context_sql`; its inputs are the streams it reads)."""
        from moirae.base.durations import parse_duration

        self._need_event(event, "context-query")
        existing = self.contexts.setdefault(event, [])
        name = check_name("context-query", name or f"c{len(existing)}")
        if any(c.name == name for c in existing):
            raise QueryDefinitionError(f"context-query {name!r} of {event!r} is already deployed")
        if isinstance(inputs, str):
            inputs = (inputs,)
        sql = fn if isinstance(fn, str) else None
        if sql is not None:
            reads = context_sql.prepare(event, name, sql, {sp.name for sp in self.archiver.streams()})
            if inputs is not None and set(inputs) != set(reads):
                raise QueryDefinitionError(f"context-query {name!r} of {event!r}: inputs {list(inputs)} differ "
                                           f"from the streams its SQL reads {list(reads)}")
            inputs, fn = reads, None
        elif not callable(fn):
            raise QueryDefinitionError(f"context-query {name!r} of {event!r} must be a function or SQL text, "
                                       f"got {type(fn).__name__}")
        elif inputs is None:
            raise QueryDefinitionError(f"context-query {name!r} of {event!r}: a function needs its inputs")
        inputs = tuple(inputs)
        for s in inputs:
            self.archiver.stream(s)
        cq = ContextQuery(event, name, fn, inputs, parse_duration(window), surrounding, parse_duration(after),
                          sql=sql)
        ev_spec = self.archiver.stream(self.flows[event].stream)
        self.archiver.register_stream(context_spec(self.spark, self.archiver, cq, self.event_queries[event], ev_spec))
        existing.append(cq)
        return cq

    def recall(self, event: str, sql: str, name: str | None = None, **kwargs: Any) -> Recall:
        self._need_event(event, "Recall")
        name = check_name("recall", name or f"{event}_recall{len(self.operators[event])}")
        q = self.event_queries[event]
        kwargs.setdefault("feedback_period", self.settings.recall.feedback_period)
        kwargs.setdefault("tickets", self.settings.recall.default_tickets)
        op = Recall(name, sql, store=self.archiver, eid_attr=q.eid, ts_attr=q.ts, **kwargs)
        self.manager.register(op)
        self.operators[event].append(name)
        self.ops[name] = op
        return op

    def similarity_recall(self, event: str, k: int | None = None, name: str | None = None, **kwargs: Any):
        from recall.similarity_recall import SimilarityRecall

        self._need_event(event, "Similarity Recall")
        name = check_name("similarity recall", name or f"{event}_similar")
        cqs = self.contexts.get(event, [])
        q = self.event_queries[event]
        kwargs.setdefault("feedback_period", self.settings.recall.feedback_period)
        kwargs.setdefault("tickets", self.settings.recall.default_tickets)
        kwargs.setdefault("resolutions", self.incidents.resolutions)  # resolutions recorded by on-call (M 3.3)
        numeric = kwargs.get("numeric", ())
        if isinstance(numeric, str):
            numeric = [numeric]
        if not isinstance(numeric, Mapping):  # names: the configured bandwidth and bins (M 3.5)
            kwargs["numeric"] = {n: self.settings.similarity.numeric_spec() for n in numeric}
        kwargs.setdefault("incidents", self._incident_rule(event, q.eid))
        kwargs.setdefault("novelty", self.settings.similarity.novelty_calibrator())
        kwargs.setdefault("index_cache_bytes", self.settings.similarity.index_cache_mb * 2**20)
        kwargs.setdefault("idf", self.settings.similarity.idf)
        op = SimilarityRecall(name, event=event, store=self.archiver, event_stream=self.flows[event].stream,
                              context_streams=[context_stream(event, c.name) for c in cqs if not c.surrounding],
                              surrounding_streams=[context_stream(event, c.name) for c in cqs if c.surrounding],
                              k=k or self.settings.similarity.k, eid_attr=q.eid, ts_attr=q.ts, **kwargs)
        snap = load_similarity(self.db, name)
        if snap is not None and not op.restore(snap):  # E and C_k continue from the last run (M 3.5)
            forget_learned(self.db, name)  # or start afresh, their events to be learned again
        self.manager.register(op)
        if op.source.persisted is not None:
            self.indexes.add(op)
            self.indexes.start()
        self.operators[event].append(name)
        self.ops[name] = self.deployed.similarity[name] = op
        return op

    def _incident_rule(self, event: str, eid_col: str):
        """How past events of ``event`` group into incidents for Similarity Recall: the
        incident store's rule when configured, else keyed by the event stream's text
        attributes (what the store does for an unconfigured type), 5-minute windows."""
        from archive.types import ColumnType
        from similarity.incidents import IncidentRule

        cfg = self.incidents.configs.get(event)
        if cfg is not None:
            return cfg.rule
        spec = self.archiver.stream(self.flows[event].stream)
        keys = tuple(sorted(c for c, t in spec.columns.items() if t is ColumnType.TEXT and c != eid_col))
        rule = IncidentRule(keys, timedelta(minutes=5))
        return self.incidents.configs.setdefault(event, IncidentConfig(rule)).rule  # the store groups alike

    def _need_event(self, event: str, what: str) -> None:
        if event not in self.event_queries:
            raise QueryDefinitionError(f"{what} attached to unknown event-query {event!r} "
                                       f"(deployed: {sorted(self.event_queries)})")

    # -- retiring (moirae.deploy.lifecycle) -------------------------------------------

    def remove_event_query(self, name: str, *, fresh: bool = False, drop_archive: bool = False,
                           grace: float | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Retire event-query ``name`` and everything attached to it, on a running engine:
        its streaming queries stop between micro-batches, the event worker processes no
        more of its batches (the events of those still queued stay archived in its event
        stream, unlogged), every open recall task of its events (and its
        replica task) is cancelled, its operators leave the Recall Manager, the index
        builder and memory, its provenance graph's connection is closed. Its archived
        streams stay unless ``drop_archive`` (then its event and context streams, its
        provenance tables, its similarity statistics and indexes, and its checkpoints
        are dropped); ``fresh`` drops its checkpoints only (a changed definition starts
        its streaming query anew). ``grace``: how long a micro-batch in flight is waited
        for (default ``spark.stop_grace``; one stopped inside a batch replays it from its
        checkpoint if deployed again). Returns what was retired, with the seconds of each
        step under ``phases``."""
        from moirae.ingest.persist import forget_similarity

        flow = self.flows.get(name)
        if flow is None:
            raise QueryDefinitionError(f"no event-query {name!r} is deployed (deployed: {sorted(self.flows)})")
        phases: dict[str, float] = {}
        t = time.monotonic()

        def lap(what: str) -> None:
            nonlocal t
            now = time.monotonic()
            phases[what] = round(now - t, 3)
            t = now

        flow.retired = True  # a micro-batch under way gives up at its next step; queued ones are skipped
        flow.stop(grace)
        lap("stop_query")
        # its batches still queued are not processed (their events stay archived in its
        # stream) and a run of them under way ends before its operators go
        self.worker.forget(flow, timeout)
        lap("drain_events")
        op_names = list(self.operators.get(name, []))
        replica = f"replica_{name}"
        ours = {*op_names, replica}
        eids = sorted({t.eid for t in self.manager.tasks() if t.operator in ours and t.ended_at is None})
        with self.events.deferred():
            cancelled = self.manager.cancel_many(eids, wait=timeout) if eids else {}
        lap("cancel_tasks")
        for op_name in [*op_names, replica]:
            try:
                self.manager.unregister(op_name)
            except LookupError:
                pass
            op = self.ops.pop(op_name, None)
            sim = self.deployed.similarity.pop(op_name, None)
            if sim is not None:
                self.indexes.remove(sim)
                sim.source.close()
                sim.source.invalidate_all()
                if drop_archive:
                    if sim.source.persisted is not None:
                        sim.source.persisted.clear()
                    forget_similarity(self.db, op_name)
                else:  # its statistics go on from here when it is deployed again (M 3.5)
                    save_operator(self.db, op_name, sim)
            del op
        streams = [flow.stream, *(context_stream(name, c.name) for c in self.contexts.get(name, []))]
        inputs = list(self.event_queries[name].inputs)
        if flow.graph is not None:
            flow.graph.close()
        for held in (self.event_queries, self.flows, self.contexts, self.operators, self.deployed.monitor_of):
            held.pop(name, None)
        with self.units._lock:  # what its units were materialized from no longer says anything
            for key in [k for k in self.units._inputs if k[0] == name]:
                del self.units._inputs[key]
        lap("free_operators")
        dropped: list[str] = []
        checkpoint = self.sources.checkpoint_dir(flow.stream)
        if fresh or drop_archive:
            self._forget_version(name, flow.stream, streams, inputs, checkpoint, flow.query.eid)
        if drop_archive:
            for stream in streams:
                if self.archiver.drop_stream(stream):
                    dropped.append(stream)
            if flow.graph is not None:
                with self.db.connection() as conn, conn.cursor() as cur:
                    for table in (flow.graph.v, flow.graph.e, flow.graph.lab):
                        cur.execute(f"DROP TABLE IF EXISTS {table} CASCADE")  # the contributing view is remade
                dropped.extend((flow.graph.v, flow.graph.e, flow.graph.lab))
            if flow.polys is not None and flow.polys.drop(name):  # its alerts' polynomials go with its graph
                dropped.append(f"{flow.polys.t}[{name}]")
        lap("archive")
        return {"event_query": name, "operators": op_names, "cancelled": cancelled, "inputs": inputs,
                "streams": streams, "dropped": dropped, "phases": phases}

    #: the file in an event-query's checkpoint naming the monitor version that wrote it
    VERSION_FILE = "moirae_monitor_version"

    def _claim_checkpoint(self, flow: EventFlow, version: str) -> None:
        """Before a monitor's event-query starts: its checkpoint (and its streams' batch
        log) resume only the version that wrote them. One written by another version, or
        before versions were recorded, is dropped with what it numbered
        (:meth:`_forget_version`); ``resumed`` says which flows go on from their own."""
        name = flow.query.name
        checkpoint = self.sources.checkpoint_dir(flow.stream)
        marker = checkpoint / self.VERSION_FILE
        written = marker.read_text().strip() if marker.exists() else None
        if written == version:
            self.resumed.add(name)
            return
        self.resumed.discard(name)
        if checkpoint.exists():
            streams = [flow.stream, *(s.name for s in self.archiver.streams() if s.name.startswith(f"cx_{name}_"))]
            self._forget_version(name, flow.stream, streams, list(flow.query.inputs), checkpoint, flow.query.eid)
        checkpoint.mkdir(parents=True, exist_ok=True)
        marker.write_text(version + "\n")

    def _forget_version(self, name: str, stream: str, streams: list[str], inputs: list[str], checkpoint: Path,
                        eid: str) -> None:
        """What ties ``name``'s archive to the query version that wrote it goes: its
        checkpoints, its materialization tags on its inputs, its streams' batch log (the
        next query numbers its batches from 0 again), and the events that version
        archived but never recorded (never alerts: the next version detects anew)."""
        import shutil

        from archive.drop import forget_batches, forget_tag
        from archive.names import quote
        from moirae.materialize.replica import tag_of

        for path in (checkpoint, Path(f"{checkpoint}-ankn")):
            shutil.rmtree(path, ignore_errors=True)
        forget_tag(self.archiver, inputs, tag_of(name))
        forget_batches(self.archiver, streams)
        if stream in self.archiver.catalog.names():
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute(f"DELETE FROM {quote(stream)} e WHERE e._batch >= 0 AND NOT EXISTS "
                            f"(SELECT 1 FROM moirae_events m WHERE m.eid = e.{quote(eid)}::text)")

    # -- running ---------------------------------------------------------------------

    def start(self) -> None:
        for record in self.events.open_events():  # resume recall of events left open
            names = self.operators.get(record.event, [])
            if names:
                self.manager.submit(record.as_event(), names)
        self.recover()
        self.worker.start()
        if not self.periodic.running:
            self.periodic.start()
        for name, flow in self.flows.items():
            self._start_flow(flow)
            self.materialize_recent(name)

    def recover(self) -> int:
        """Process live events archived but never recorded (a crash after Spark committed
        their batch, before the worker was done); returns how many."""
        return sum(self.recover_flow(flow) for flow in list(self.flows.values()))

    def recover_flow(self, flow: EventFlow, queue: bool = False) -> int:
        """:meth:`recover` for one event-query (one deployed on a running engine: a
        monitor restored after a restart, or deployed again after an undeploy);
        ``queue``: hand the batches to the event worker instead of processing them here."""
        n = 0
        spec = self.archiver.stream(flow.stream)
        q = flow.query
        lost = unlogged_events(self.db, flow.stream, q.eid, [c for c, _ in spec.id_columns])
        for batch_id, frame in lost.groupby("_batch", sort=True):
            frame = frame.drop(columns=["_batch"]).reset_index(drop=True)
            frame[q.ts] = pd.to_datetime(frame[q.ts], utc=True)
            log.warning("moirae: recovering %d unrecorded events of %r from batch %d", len(frame), q.name,
                        batch_id)
            (self.on_events if queue else self.processor.process)(flow, frame, int(batch_id), False)
            n += len(frame)
        return n

    def _start_flow(self, flow: EventFlow) -> None:
        flow.start(str(self.sources.checkpoint_dir(flow.stream)),
                   f"{int(self.settings.spark.trigger.total_seconds() * 1000)} milliseconds")

    def restart_flow(self, flow: EventFlow) -> None:
        """Start a stopped (or failed) event-query again from its checkpoint."""
        flow.stop()
        self._start_flow(flow)

    def stop(self) -> None:
        """Stop every event-query between micro-batches, then the event worker. The
        queries of a wave (:func:`stop_waves`) stop together, each waiting for its own
        micro-batch to end (up to its grace), so a backlogged engine stops in about one
        grace per wave, not one per query. One whose stop fails does not keep the others
        running: each is stopped, the failures logged, and the first raised once all
        were tried."""
        failed: list[Exception] = []

        def stop(flow: EventFlow) -> None:
            try:
                flow.stop()
            except Exception as exc:  # noqa: BLE001 - raised below, after the rest are stopped
                log.error("deploy: stopping event-query %r failed: %s", flow.query.name, exc)
                failed.append(exc)

        for wave in stop_waves(list(self.flows.values())):
            threads = [threading.Thread(target=stop, args=(f,), name=f"moirae-stop-{f.query.name}") for f in wave[1:]]
            for t in threads:
                t.start()
            stop(wave[0])  # the wave's first in this thread, the rest beside it
            for t in threads:
                t.join()
        self.worker.stop()  # the events already handed over are processed (the sources still run)
        if failed:
            raise failed[0]

    def save_state(self) -> None:
        """Persist what must survive a restart besides the archive (similarity statistics)."""
        for name, op in list(self.deployed.similarity.items()):  # each under its save lock (persist.save_operator)
            save_operator(self.db, name, op)

    def close(self) -> None:
        """Stop, then release everything, a failed stop too (raised after)."""
        try:
            self.stop()
        finally:
            self._release()

    def _release(self) -> None:
        # the shutdown cancels every open task; their events' recall is interrupted, not
        # ended, so a restart resumes it (as after a crash); a user's cancel before this
        # point was recorded as the end
        self._closing = True
        self.periodic.shutdown()
        self.indexes.close()  # the build under way finishes; the rest are built on first use
        self.manager.close()
        self.results.close()
        self.events.close()
        self.save_state()
        self.processor.close()
        for flow in self.flows.values():  # last: the final maintenance may have labelled sources
            if flow.graph is not None:
                flow.graph.close()

    def on_events(self, flow: EventFlow, frame: pd.DataFrame, batch_id: int, replay: bool,
                  started: float | None = None) -> None:
        """New events from a live batch (begun at wall time ``started``), archived:
        handed to the event worker."""
        self.worker.submit(flow, frame, batch_id, replay, started)

    def _on_output(self, out) -> None:
        try:
            self.incidents.on_output(out)  # a refined norm changes an incident's severity
        except Exception as exc:
            log.warning("incidents: output of %s for %s not applied: %s", out.operator, out.eid, exc)
        if out.kind is OutputKind.BOUNDARY:
            interrupted = self._closing and "cancelled" in (out.row or {}).get("ended", {}).values()
            if not interrupted:
                self.events.mark_ended(out.eid)
            return
        latency = self.events.note_history(out.eid)
        if latency is not None:
            with self._lock:
                self.alert_latencies.append(latency)

    def live_queries(self) -> list[LiveQuery]:
        """The event-queries' streaming queries now (and ANK-N's), for the supervisor."""
        out = []
        for flow in list(self.flows.values()):
            if flow.retired:  # stopping on purpose: not the supervisor's to judge
                continue
            restart = lambda flow=flow: self.restart_flow(flow)  # noqa: E731
            checkpoint = self.sources.checkpoint_dir(flow.stream)
            out.append(LiveQuery(f"event_{flow.query.name}", flow.streaming, checkpoint, restart))
            if flow.ankn_streaming is not None:
                out.append(LiveQuery(f"ankn_{flow.query.name}", flow.ankn_streaming, Path(f"{checkpoint}-ankn"),
                                     restart))
        return out

    def live_status(self) -> dict[str, Any]:
        """Per event-query: events seen, driver seconds per phase, window provenance; and
        the event worker's state."""
        flows = {n: {"events": f.events_seen, "seconds": f.timings(),
                     **({"window_provenance": f.resolver.status()} if f.resolver is not None else {})}
                 for n, f in self.flows.items()}
        w = self.worker
        worker = {"running": w.running, "pending_batches": w.pending(), "batches": w.batches, "errors": w.errors,
                  "last_error": w.last_error}
        return {"event_queries": flows, "event_worker": worker}


def stop_waves(flows: list) -> list[list]:
    """``flows`` (:class:`~moirae.ingest.live.EventFlow`) in waves to stop, each wave's
    together: an event-query whose read archives a source (:mod:`archive.shared`) in a
    later wave than every other one that reads that source. Each read's last
    micro-batches then still find their windows' source tuples archived (the archive
    wait, :mod:`moirae.ingest.archive_waits`, ends at once for a source no longer
    archived, and the window digests would resolve to the part archived before its
    archiving read stopped, committed with the batch). Within a wave, the deployment
    order; a cycle (two reads, each archiving a source the other reads) is broken by
    stopping its first deployed read alone.
    """
    archives = [{sh.stream for sh in f.shared} for f in flows]
    reads = [[s for s in f.query.inputs if s not in archives[i]] for i, f in enumerate(flows)]
    readers = Counter(s for r in reads for s in r)  # source -> flows still running that read it, not archiving it
    left, waves = list(range(len(flows))), []
    while left:
        wave = [i for i in left if not any(readers[s] for s in archives[i])] or left[:1]
        for i in wave:
            readers.subtract(reads[i])
            left.remove(i)
        waves.append([flows[i] for i in wave])
    return waves


def stop_order(flows: list) -> list:
    """:func:`stop_waves` one after another: an order to stop ``flows`` in one by one."""
    return [f for wave in stop_waves(flows) for f in wave]
