"""New events of the live event-queries, processed (M 3.3, 4.3): their contexts, the
event log, the similarity statistics, and one recall task per attached operator.

The event worker (:mod:`moirae.ingest.event_worker`) calls :meth:`EventProcessor.process_many`
with one event-query's backlog of archived batches. Contexts must see every source tuple
up to the events, so it first waits for the archive of the event-query's inputs and of
every input its context-queries read (:class:`moirae.ingest.archive_waits.ArchiveWaits`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from archive import Archiver
from moirae.ingest.archive_waits import ArchiveWaits
from moirae.ingest.events import EventLog, EventRecord
from moirae.ingest.live import EventFlow
from moirae.materialize.replica import FlaggedReads
from moirae.queries.context import ContextRunner, compute_context, contexts_by_eid
from moirae.queries.hybrid import ContextQuery, EventQuery, context_stream
from recall.manager import RecallManager

if TYPE_CHECKING:  # imported where the first one is built (moirae.deploy.manager)
    from recall.similarity_recall import SimilarityRecall


@dataclass
class Deployed:
    """The deployed hybrid queries, by event-query name, and the recall operators attached."""

    event_queries: dict[str, EventQuery] = field(default_factory=dict)
    flows: dict[str, EventFlow] = field(default_factory=dict)
    contexts: dict[str, list[ContextQuery]] = field(default_factory=dict)
    operators: dict[str, list[str]] = field(default_factory=dict)  # event-query -> its operators' names
    ops: dict[str, Any] = field(default_factory=dict)  # operator name -> the operator
    similarity: dict[str, SimilarityRecall] = field(default_factory=dict)  # the Similarity Recalls among ops
    #: event-query -> (monitor, version) of the monitor that deployed it (moirae.deploy.lifecycle)
    monitor_of: dict[str, tuple[str, str]] = field(default_factory=dict)


class EventProcessor:
    """Contexts, the event log, learning and recall submission for batches of new events."""

    def __init__(self, archiver: Archiver, spark: Callable[[], Any], waits: ArchiveWaits, trigger_s: float,
                 deployed: Deployed, events: EventLog, recall: RecallManager) -> None:
        self.archiver = archiver
        self.spark = spark
        self.waits = waits
        self.trigger_s = trigger_s
        self.deployed = deployed
        self.events = events
        self.recall = recall
        self.context_runner = ContextRunner()

    def process(self, flow: EventFlow, frame: pd.DataFrame, batch_id: int, replay: bool,
                started: float | None = None) -> None:
        """Contexts, the event log, recall submission, for one batch of new events."""
        self.process_many(flow, [(frame, batch_id, replay, started)])

    def process_many(self, flow: EventFlow, batches: list[tuple]) -> None:
        """The same for several batches of one event-query at once (the worker's backlog):
        one archive wait, one run of each context-query over all their events; each
        batch's context rows are still archived under its own batch id (exactly once)."""
        q = flow.query
        frame = pd.concat([b[0] for b in batches], ignore_index=True) if len(batches) > 1 else batches[0][0]
        starts = [b[3] for b in batches if b[3] is not None]
        cqs = self.deployed.contexts.get(q.name, [])
        streams = [*q.inputs, *(s for cq in cqs for s in cq.inputs)]
        t0 = time.perf_counter()
        self.waits.wait(streams, frame[q.ts].max().to_pydatetime(), timeout=5 * self.trigger_s + 2,
                        why=f"events of {q.name!r}", since=max(starts) if starts else None)
        t1 = time.perf_counter()
        flow.seconds["wait"] += t1 - t0
        contexts = self._contexts(flow, cqs, frame, batches)
        t2 = time.perf_counter()
        flow.seconds["contexts"] += t2 - t1
        self._record(q, frame, contexts)
        flow.seconds["events"] += time.perf_counter() - t2

    def _contexts(self, flow: EventFlow, cqs: list[ContextQuery], frame: pd.DataFrame,
                  batches: list[tuple]) -> dict[ContextQuery, pd.DataFrame]:
        """Each context-query over ``frame``'s events, archived per batch, side by side."""
        q = flow.query
        ev_spec = self.archiver.stream(flow.stream)

        def context(cq):
            cx, _schema = compute_context(self.spark(), self.reads_for(cq), cq, frame, ev_spec, q.eid, q.ts)
            stream = context_stream(q.name, cq.name)
            for part_frame, batch_id, _replay, _started in batches:
                part = cx if len(batches) == 1 else cx[cx[q.eid].isin(part_frame[q.eid])]
                if len(part):
                    self.archiver.append(stream, batch_id, part, key=q.eid)
            return cx

        return self.context_runner.run(cqs, context)

    def reads_for(self, cq: ContextQuery):
        """What ``cq`` reads its inputs through: the archive itself, or, when one of its
        inputs has rows marked bad (a retraction or correction: the archive's
        ``row_flags``), :class:`moirae.materialize.replica.FlaggedReads`, so a Spark
        context-query of an alert raised after a retraction never reads a removed row and
        reads a corrected one's new values (a SQL one reads ``row_flags`` inside its query,
        :mod:`moirae.queries.context_sql`). No flags on its inputs: one set lookup."""
        flags = getattr(self.archiver, "row_flags", None)
        if flags is None or cq.sql is not None or not hasattr(flags, "rows"):
            return self.archiver
        on = flags.flagged_streams()
        return FlaggedReads(self.archiver, flags) if on and any(s in on for s in cq.inputs) else self.archiver

    def _record(self, q: EventQuery, frame: pd.DataFrame, contexts: dict[ContextQuery, pd.DataFrame]) -> None:
        """Log the events with their contexts; each new one is learned, published and recalled."""
        records = []
        monitor, version = self.deployed.monitor_of.get(q.name, (None, None))  # which version raised it
        by_eid = {cq: contexts_by_eid(cx, q.eid, q.ts) for cq, cx in contexts.items()}  # one pass per query
        for row in frame.to_dict("records"):
            eid = str(row[q.eid])
            attrs = {k: v for k, v in row.items() if k not in (q.eid, q.ts)}
            rec = EventRecord(q.name, eid, row[q.ts].to_pydatetime(), attrs, monitor=monitor, version=version)
            for cq in contexts:
                tuples = by_eid[cq].get(row[q.eid], [])
                if cq.surrounding:
                    rec.surrounding[cq.name] = tuples
                else:
                    rec.context.extend(tuples)
            records.append(rec)
        for rec in self.events.add(records):
            self.learn(q.name, rec.eid, rec.context)
            self.recall.bus.publish({"type": "event", **rec.to_json()})
            names = self.deployed.operators.get(q.name, [])
            if names:
                self.recall.submit(rec.as_event(), names)
            else:
                self.events.mark_ended(rec.eid)

    def learn(self, name: str, eid: str, context: list[dict]) -> None:
        """A new live event of ``name`` updates its operators' similarity statistics (M 3.5);
        a context they reject is a dead letter of the event stream."""
        d = self.deployed
        for op_name in d.operators.get(name, []):
            op = d.similarity.get(op_name)
            if op is not None and not op.learn_event(eid, context):
                self.archiver.dead_letter(d.flows[name].stream, {"eid": eid, "context": context}, op.rejected[-1][1])

    def on_materialized(self, name: str, events: pd.DataFrame, contexts: dict) -> None:
        """Materialized past events update the similarity statistics (M 3.5), once each."""
        d = self.deployed
        frames = [cx for cq, cx in contexts.items() if not cq.surrounding]
        for op_name in d.operators.get(name, []):
            op = d.similarity.get(op_name)
            if op is not None:
                for eid, reason in op.learn_contexts(events, frames):
                    self.archiver.dead_letter(d.flows[name].stream, {"eid": eid}, reason)

    def close(self) -> None:
        self.context_runner.close()
