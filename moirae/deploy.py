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

import inspect
import logging
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pandas as pd

from archive.spark_sink import spark_schema, spec_from_spark_schema
from archive.streams import StreamSpec
from moirae import context_sql
from moirae.context import ContextRunner, compute_context, context_tuples
from moirae.event_worker import EventWorker, unlogged_events
from moirae.events import EventLog, EventRecord
from moirae.hybrid import ContextQuery, EventQuery, QueryDefinitionError, check_name, context_stream
from moirae.incidents import IncidentConfig, IncidentStore
from moirae.live import EventFlow
from moirae.materialize import ReplicaOperator, raw_chunks, replica_event
from moirae.persist import forget_learned, load_similarity, save_similarity
from moirae.unit_inputs import UnitLedger
from recall.api import OutputKind
from recall.manager import RecallManager
from recall.operator import Recall
from recall.outputs import ResultsTable
from recall.periodic import PeriodicJobs
from recall.similarity_prebuild import IndexPrebuilder
from scheduler.config import SchedulerConfig
from scheduler.scheduler import StrideScheduler

log = logging.getLogger(__name__)


class DeployManager:
    def __init__(self, engine) -> None:
        self.engine = engine
        rc = engine.settings.recall
        self.scheduler = StrideScheduler(SchedulerConfig(
            default_tickets=rc.default_tickets, min_tickets=rc.min_tickets,
            tickets_per_result=rc.tickets_per_result, light_load=rc.materialization_load_threshold,
            feedback_period=rc.feedback_period, feedback_timeout=rc.feedback_timeout.total_seconds()))
        self.results = ResultsTable(engine.db)
        self.events = EventLog(engine.db)
        self.manager = RecallManager(
            engine.archiver, self.scheduler, max_concurrent=rc.max_concurrent,
            on_output=[self.results.append, self._on_output],
            timeout_ms=engine.settings.archive.settings().statement_timeout_ms)
        self.incidents = IncidentStore(engine.db, publish=self.manager.bus.publish, events=self.events)
        self.events.listeners.append(self.incidents.record)
        self.event_queries: dict[str, EventQuery] = {}
        self.flows: dict[str, EventFlow] = {}
        self.contexts: dict[str, list[ContextQuery]] = {}
        self.operators: dict[str, list[str]] = {}
        self.ops: dict[str, Any] = {}
        self.alert_latencies: list[float] = []
        self.worker = EventWorker(self._process, many=self._process_many)
        self.context_runner = ContextRunner()
        # discards the tasks of events left without feedback past recall.feedback_timeout
        # (M 4.4) and forgets ended tasks' statistics: without it suspended tasks stay open
        self.periodic = PeriodicJobs(self.manager)
        self.units = UnitLedger()  # what each materialized unit was computed from (moirae.unit_inputs)
        self.indexes = IndexPrebuilder()  # similarity indexes of sealed / materialized chunks, in the background
        self._lock = threading.Lock()
        self._closing = False

    # -- deployment ------------------------------------------------------------------

    def event_query(self, name: str, fn, inputs, eid: str = "eid", ts: str = "ts") -> EventQuery:
        check_name("event-query", name)
        if name in self.event_queries:
            raise QueryDefinitionError(f"event-query {name!r} is already deployed")
        inputs = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        q = EventQuery(name, fn, inputs, eid, ts)
        flow = EventFlow(self.engine, q, provenance=self.engine.settings.ananke.enabled)
        self.event_queries[name] = q
        self.flows[name] = flow
        self.operators.setdefault(name, [])
        self.manager.register(ReplicaOperator(self.engine, name))
        if self.engine.started:
            self._start_flow(flow)
            self.materialize_recent(name)
        return q

    def materialize_recent(self, name: str) -> str | None:
        """Submit the low-priority replica task re-creating ``name``'s present and recent
        history (M 4.2); None when there is no raw history yet."""
        if not raw_chunks(self.engine, name):
            return None
        return self.manager.submit(replica_event(name), [f"replica_{name}"])[0]

    def on_materialized(self, name: str, events: pd.DataFrame, contexts: dict) -> None:
        """Materialized past events update the similarity statistics (M 3.5), once each."""
        frames = [cx for cq, cx in contexts.items() if not cq.surrounding]
        for op_name in self.operators.get(name, []):
            learn = getattr(self.ops.get(op_name), "learn_contexts", None)
            if learn is not None:
                for eid, reason in learn(events, frames):
                    self.engine.archiver.dead_letter(self.flows[name].stream, {"eid": eid}, reason)

    def _learn(self, name: str, eid: str, context: list[dict]) -> None:
        for op_name in self.operators.get(name, []):
            learn = getattr(self.ops.get(op_name), "learn_event", None)
            if learn is not None and not learn(eid, context):
                self.engine.archiver.dead_letter(self.flows[name].stream, {"eid": eid, "context": context},
                                                 self.ops[op_name].rejected[-1][1])

    def context_query(self, event: str, fn, inputs=None, name: str | None = None, window: timedelta | str = "5m",
                      surrounding: bool = False, after: timedelta | str = 0) -> ContextQuery:
        """``fn`` is a Spark function ``(events, *inputs)`` or SQL text over ``events`` and
        archived streams (:mod:`moirae.context_sql`; its inputs are the streams it reads)."""
        from moirae.config import parse_duration

        self._need_event(event, "context-query")
        existing = self.contexts.setdefault(event, [])
        name = check_name("context-query", name or f"c{len(existing)}")
        if any(c.name == name for c in existing):
            raise QueryDefinitionError(f"context-query {name!r} of {event!r} is already deployed")
        if isinstance(inputs, str):
            inputs = (inputs,)
        sql = fn if isinstance(fn, str) else None
        if sql is not None:
            reads = context_sql.prepare(event, name, sql, {sp.name for sp in self.engine.archiver.streams()})
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
            self.engine.archiver.stream(s)
        cq = ContextQuery(event, name, fn, inputs, parse_duration(window), surrounding, parse_duration(after),
                          sql=sql)
        self._register_context_stream(cq)
        existing.append(cq)
        return cq

    def _register_context_stream(self, cq: ContextQuery) -> None:
        """Archive inference (M 4.2): the context stream is archived from deployment on.
        Its schema comes from applying the function to empty inputs (no Spark job), or
        from running the SQL for no events."""
        spark, arch = self.engine.spark, self.engine.archiver
        q = self.event_queries[cq.event]
        ev_spec = arch.stream(self.flows[cq.event].stream)
        name = context_stream(cq.event, cq.name)
        if cq.sql is not None:
            probe = pd.DataFrame(columns=[c for c, _ in ev_spec.id_columns])
            _rows, types = context_sql.run(arch, cq.sql, cq.inputs, probe, ev_spec, cq.window, cq.after,
                                           f"context-query {cq.name!r} of {cq.event!r}")
            columns = set(types)
        else:
            empty = [spark.createDataFrame([], spark_schema(arch.stream(s))) for s in (ev_spec.name, *cq.inputs)]
            schema = cq.fn(*empty).schema
            columns = {f.name for f in schema.fields}
        if q.eid not in columns or q.ts not in columns:
            raise QueryDefinitionError(f"context-query {cq.name!r} of {cq.event!r} must produce columns "
                                       f"{q.eid!r} and {q.ts!r}, got {sorted(columns)}")
        spec = (StreamSpec.build(name, q.ts, types, kind="context", indexes=[(q.eid,)]) if cq.sql is not None
                else spec_from_spark_schema(name, schema, q.ts, kind="context", indexes=[(q.eid,)]))
        arch.register_stream(spec)

    def recall(self, event: str, sql: str, name: str | None = None, **kwargs: Any) -> Recall:
        self._need_event(event, "Recall")
        name = check_name("recall", name or f"{event}_recall{len(self.operators[event])}")
        q = self.event_queries[event]
        kwargs.setdefault("feedback_period", self.engine.settings.recall.feedback_period)
        kwargs.setdefault("tickets", self.engine.settings.recall.default_tickets)
        op = Recall(name, sql, store=self.engine.archiver, eid_attr=q.eid, ts_attr=q.ts, **kwargs)
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
        kwargs.setdefault("feedback_period", self.engine.settings.recall.feedback_period)
        kwargs.setdefault("tickets", self.engine.settings.recall.default_tickets)
        if "resolutions" in inspect.signature(SimilarityRecall).parameters:
            kwargs.setdefault("resolutions", self.incidents.resolutions)  # resolutions recorded by on-call (M 3.3)
        numeric = kwargs.get("numeric", ())
        if isinstance(numeric, str):
            numeric = [numeric]
        if not isinstance(numeric, Mapping):  # names: the configured bandwidth and bins (M 3.5)
            kwargs["numeric"] = {n: self.engine.settings.similarity.numeric_spec() for n in numeric}
        kwargs.setdefault("incidents", self._incident_rule(event, q.eid))
        kwargs.setdefault("novelty", self.engine.settings.similarity.novelty_calibrator())
        kwargs.setdefault("index_cache_bytes", self.engine.settings.similarity.index_cache_mb * 2**20)
        kwargs.setdefault("idf", self.engine.settings.similarity.idf)
        op = SimilarityRecall(name, event=event, store=self.engine.archiver, event_stream=self.flows[event].stream,
                              context_streams=[context_stream(event, c.name) for c in cqs if not c.surrounding],
                              surrounding_streams=[context_stream(event, c.name) for c in cqs if c.surrounding],
                              k=k or self.engine.settings.similarity.k, eid_attr=q.eid, ts_attr=q.ts, **kwargs)
        snap = load_similarity(self.engine.db, name)
        if snap is not None and not op.restore(snap):  # E and C_k continue from the last run (M 3.5)
            forget_learned(self.engine.db, name)  # or start afresh, their events to be learned again
        self.manager.register(op)
        if op.source.persisted is not None:
            self.indexes.add(op)
            self.indexes.start()
        self.operators[event].append(name)
        self.ops[name] = op
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
        spec = self.engine.archiver.stream(self.flows[event].stream)
        keys = tuple(sorted(c for c, t in spec.columns.items() if t is ColumnType.TEXT and c != eid_col))
        rule = IncidentRule(keys, timedelta(minutes=5))
        return self.incidents.configs.setdefault(event, IncidentConfig(rule)).rule  # the store groups alike

    def _need_event(self, event: str, what: str) -> None:
        if event not in self.event_queries:
            raise QueryDefinitionError(f"{what} attached to unknown event-query {event!r} "
                                       f"(deployed: {sorted(self.event_queries)})")

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
        n = 0
        for flow in self.flows.values():
            spec = self.engine.archiver.stream(flow.stream)
            q = flow.query
            lost = unlogged_events(self.engine.db, flow.stream, q.eid, [c for c, _ in spec.id_columns])
            for batch_id, frame in lost.groupby("_batch", sort=True):
                frame = frame.drop(columns=["_batch"]).reset_index(drop=True)
                frame[q.ts] = pd.to_datetime(frame[q.ts], utc=True)
                log.warning("moirae: recovering %d unrecorded events of %r from batch %d", len(frame), q.name,
                            batch_id)
                self._process(flow, frame, int(batch_id), False)
                n += len(frame)
        return n

    def _start_flow(self, flow: EventFlow) -> None:
        e = self.engine
        flow.start(str(e.checkpoint_dir(flow.stream)),
                   f"{int(e.settings.spark.trigger.total_seconds() * 1000)} milliseconds")

    def restart_flow(self, flow: EventFlow) -> None:
        """Start a stopped (or failed) event-query again from its checkpoint."""
        flow.stop()
        self._start_flow(flow)

    def stop(self) -> None:
        for flow in self.flows.values():
            flow.stop()
        self.worker.stop()  # the events already handed over are processed (the sources still run)

    def save_state(self) -> None:
        """Persist what must survive a restart besides the archive (similarity statistics)."""
        for name, op in self.ops.items():
            if hasattr(op, "state_delta"):
                snap, learned = op.state_delta()
                try:
                    save_similarity(self.engine.db, name, snap, learned)
                except BaseException:
                    op.keep_unsaved(learned)
                    raise

    def close(self) -> None:
        self.stop()
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
        self.context_runner.close()
        for flow in self.flows.values():  # last: the final maintenance may have labelled sources
            if flow.graph is not None:
                flow.graph.close()

    def on_events(self, flow: EventFlow, frame: pd.DataFrame, batch_id: int, replay: bool,
                  started: float | None = None) -> None:
        """New events from a live batch (begun at wall time ``started``), archived:
        handed to the event worker."""
        self.worker.submit(flow, frame, batch_id, replay, started)

    def _process(self, flow: EventFlow, frame: pd.DataFrame, batch_id: int, replay: bool,
                 started: float | None = None) -> None:
        """Contexts, the event log, recall submission, for one batch of new events."""
        self._process_many(flow, [(frame, batch_id, replay, started)])

    def _process_many(self, flow: EventFlow, batches: list[tuple]) -> None:
        """The same for several batches of one event-query at once (the worker's backlog):
        one archive wait, one run of each context-query over all their events; each
        batch's context rows are still archived under its own batch id (exactly once)."""
        q = flow.query
        frame = pd.concat([b[0] for b in batches], ignore_index=True) if len(batches) > 1 else batches[0][0]
        starts = [b[3] for b in batches if b[3] is not None]
        # Contexts and history-queries must see every source tuple up to the events: wait
        # for the event-query's inputs and for every input its context-queries read.
        trigger = self.engine.settings.spark.trigger.total_seconds()
        cqs = self.contexts.get(q.name, [])
        streams = [*q.inputs, *(s for cq in cqs for s in cq.inputs)]
        t0 = time.perf_counter()
        self.engine.wait_archived(streams, frame[q.ts].max().to_pydatetime(), timeout=5 * trigger + 2,
                                  why=f"events of {q.name!r}", since=max(starts) if starts else None)
        t1 = time.perf_counter()
        flow.seconds["wait"] += t1 - t0
        ev_spec = self.engine.archiver.stream(flow.stream)

        def context(cq):  # each context-query and its archiving, side by side (ContextRunner)
            cx, _schema = compute_context(self.engine.spark, self.engine.archiver, cq, frame, ev_spec, q.eid, q.ts)
            stream = context_stream(q.name, cq.name)
            for part_frame, batch_id, _replay, _started in batches:
                part = cx if len(batches) == 1 else cx[cx[q.eid].isin(part_frame[q.eid])]
                if len(part):
                    self.engine.archiver.append(stream, batch_id, part, key=q.eid)
            return cx

        contexts = self.context_runner.run(cqs, context)
        t2 = time.perf_counter()
        flow.seconds["contexts"] += t2 - t1
        records = []
        for row in frame.to_dict("records"):
            eid = str(row[q.eid])
            attrs = {k: v for k, v in row.items() if k not in (q.eid, q.ts)}
            rec = EventRecord(q.name, eid, row[q.ts].to_pydatetime(), attrs)
            for cq, cx in contexts.items():
                tuples = context_tuples(cx, row[q.eid], q.eid, q.ts)
                if cq.surrounding:
                    rec.surrounding[cq.name] = tuples
                else:
                    rec.context.extend(tuples)
            records.append(rec)
        new = self.events.add(records)
        for rec in new:
            self._learn(q.name, rec.eid, rec.context)
            self.manager.bus.publish({"type": "event", **rec.to_json()})
            names = self.operators.get(q.name, [])
            if names:
                self.manager.submit(rec.as_event(), names)
            else:
                self.events.mark_ended(rec.eid)
        flow.seconds["events"] += time.perf_counter() - t2

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

    def horizons(self) -> dict[str, Any]:
        """Per source stream: the minimum expiry horizon of the instrumented queries
        reading it (A 5: W - U); streams no query reads are absent."""
        out: dict[str, Any] = {}
        for flow in self.flows.values():
            h = flow.horizon()
            for stream in flow.query.inputs:
                if stream in out and (out[stream] is None or h is None):
                    out[stream] = None
                elif stream in out:
                    out[stream] = min(out[stream], h)
                else:
                    out[stream] = h
        return out
