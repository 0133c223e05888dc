"""One deployed event-query running live (docs/ARCHITECTURE.md, 3.2).

The event-query's function is applied to instrumented source streams (Ananke
wrappers); its sink is one streaming query whose ``foreachBatch`` collects the batch's
events with their provenance in one Spark job (Arrow), then:

1. archives the batch's events into ``ev_<name>`` (exactly once, by batch id; an
   event the replica task materialized first is superseded, so stored once). A batch
   that detected nothing writes nothing, not even its id in the batch log: it has no
   row a replay could repeat, and most live batches detect nothing, so most triggers
   save a transaction;
2. feeds the sink tuples, their provenance (a window over one source keeps only a
   digest of it in Spark, and the window's source tuples are read back from the archive,
   :mod:`moirae.ingest.window_provenance`) and the sink watermark to ANK-1, which
   writes the live provenance graph and moves this query's expiry horizon
   ``W - U`` (A 5.1); with ``ananke.variant: ankn`` ANK-N (A 5.2) writes the graph
   instead, as a second streaming query of Spark's own operators over the same sink
   (its sources are read by both queries, so they must be replayable), and the horizon
   is the sink query's watermark minus U; with ``ananke.polynomials`` each sink tuple's
   how-provenance polynomial goes to ``ank_poly`` first (:mod:`ananke.poly_store`, H 4);
3. hands the new events to the engine's event worker (:mod:`moirae.ingest.event_worker`), which
   computes their contexts and submits the recall tasks off the batch.

A replayed batch (restart from the checkpoint) is archived once and its events are
handed on only if they were not already (the engine's event log decides).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import pandas as pd

from ananke.ank1 import Ank1
from ananke.ankn import AnkNSparkSink
from ananke.ids import PROV
from ananke.poly_store import PolyStore
from ananke.query import Provenanced, ProvQuery
from ananke.spark_adapter import Ank1SparkSink, progress_watermark
from ananke.store import GraphStore
from archive import Archiver, Database
from archive.shared import SharedArchive
from archive.spark_sink import spec_from_spark_schema
from archive.validate import storable_rows
from moirae.base.errors import MoiraeError
from moirae.config import AnankeConfig, SparkSettings
from moirae.ingest.sources import SourceRegistry
from moirae.ingest.window_provenance import ArchiveResolver
from moirae.queries.hybrid import EventQuery, QueryDefinitionError, event_stream
from moirae.runtime.graceful_stop import stop_between_batches


class QueryRetired(MoiraeError, RuntimeError):
    """Raised inside a micro-batch of an event-query being retired (it stops sooner)."""


#: ``on_events(flow, frame, batch_id, replay, started)``: a batch's new events, archived
OnEvents = Callable[["EventFlow", pd.DataFrame, int, bool, "float | None"], None]


class EventFlow:
    """The live pipeline of one event-query."""

    def __init__(self, query: EventQuery, *, sources: SourceRegistry, archiver: Archiver, db: Database,
                 ananke: AnankeConfig, spark: SparkSettings, on_events: OnEvents, provenance: bool = True) -> None:
        self.query = query
        self.sources = sources
        self.archiver = archiver
        self.spark_settings = spark
        self.on_events = on_events
        self.variant = ananke.variant if provenance else None
        # ANK-1's windows over one source keep a digest, resolved from the archive (ananke.digest)
        digest = self.variant == "ank1" and ananke.window_provenance == "archive"
        # how-provenance polynomials per alert (ananke.polynomial, H 4), written beside ANK-1's graph
        self.pq = ProvQuery(enabled=provenance, digest=digest,
                            polynomials=self.variant == "ank1" and getattr(ananke, "polynomials", True))
        self.shared: list[SharedArchive] = []  # the inputs this query's read archives (archive.shared)
        self.streaming = None  # set before the shared reads name this flow as their reader
        self.started = float("inf")  # wall time its streaming query started (moirae.runtime.idle)
        self.stopped = False  # stopped for good by stop() (until started again): its read archives no more
        #: set when its monitor is retired: a micro-batch under way gives up at its next step
        #: (uncommitted, so it replays from the checkpoint if deployed again), a new one at once
        self.retired = False
        try:
            self._build(query, provenance, db)
        except BaseException:
            for sh in self.shared:
                sources.release_shared(sh.stream, query.name)
            raise

    def _build(self, query: EventQuery, provenance: bool, db: Database) -> None:
        inputs = []
        for name in query.inputs:
            src = self.sources.get(name)
            if src is None:
                raise QueryDefinitionError(f"event-query {query.name!r} reads unknown source {name!r} "
                                           f"(sources: {sorted(self.sources.by_name)})")
            # ANK-N reads its sources a second time, in a query of its own: no shared read
            got = self.sources.shared_input(name, query.name, self) if self.variant != "ankn" else None
            if got is not None:
                self.shared.append(got[1])
            df = got[0] if got is not None else src.df
            inputs.append(self.pq.source(df, name, src.ts, cols=src.payload, lateness=None))
        out = query.fn(*inputs)
        if not isinstance(out, Provenanced):
            raise QueryDefinitionError(f"event-query {query.name!r} must return the instrumented stream "
                                       f"(a Provenanced), got {type(out).__name__}")
        cols = out.columns
        for col in (query.eid, query.ts):
            if col not in cols:
                raise QueryDefinitionError(f"event-query {query.name!r} has no column {col!r} (columns: {cols})")
        if out.ts != query.ts:
            raise QueryDefinitionError(f"event-query {query.name!r}: its event time is {out.ts!r}, "
                                       f"declared ts={query.ts!r}")
        self.sink = out.sink(query.name)
        self.stream = event_stream(query.name)
        payload_df = self.sink.df.drop(PROV) if provenance else self.sink.df
        self.archiver.register_stream(spec_from_spark_schema(self.stream, payload_df.schema, query.ts,
                                                               kind="event", indexes=[(query.eid,)]))
        self.logic = None
        self.graph: GraphStore | None = None
        self.polys: PolyStore | None = None
        self.ankn: AnkNSparkSink | None = None
        self.resolver = ArchiveResolver(self.archiver, self.sink.digest, self.sources.waits,
                                       self.spark_settings.trigger.total_seconds()) if self.sink.digest is not None else None
        self.ankn_streaming = None
        self._emitted_wm: datetime | None = None  # the highest seen by emitted_below
        if provenance:
            self.graph = GraphStore(db.connect, prefix=f"ank_{query.name}", borrow=db.connection).create()
            if self.variant == "ankn":
                self.ankn = AnkNSparkSink(self.sink, emit=self.graph, U=self.pq.U)
            else:
                self.logic = Ank1.from_query(self.pq).build(emit=self.graph)
            if self.sink.poly is not None and self.logic is not None:  # one table set for every query
                self.polys = PolyStore(db.connect, borrow=db.connection).create()
                self.polys.put_plan(self.sink.poly)
        self.adapter = (Ank1SparkSink(self.sink, self.logic, deliver_frame=self._deliver, resolve=self.resolver,
                                      polys=self._put_polys if self.polys is not None else None,
                                      values=self.resolver.values if self.resolver is not None else None)
                        if self.logic is not None else None)
        self._batch_started: float | None = None
        self.events_seen = 0
        self.seconds = {"archive": 0.0, "wait": 0.0, "contexts": 0.0, "events": 0.0}  # summed over batches

    @property
    def U(self):  # noqa: N802 - the paper's name
        return self.pq.U

    def horizon(self) -> datetime | None:
        """This query's expiry horizon ``W - U`` (A 5.1), once it has a watermark."""
        if self.ankn is not None:  # ANK-N's state is Spark's: its horizon follows the sink's watermark
            wm = self.emitted_below()
            return None if wm is None else wm - self.U
        if self.logic is None:
            return None
        if self.adapter is not None:
            self.adapter.poll()
        with self.logic.lock:
            return self.logic.horizon()

    def emitted_below(self) -> datetime | None:
        """The event time below which this query's live sink has emitted every event it
        will: the watermark its last micro-batch ran with (a window whose end is at or
        below it left in that batch or before), less the sink's hold (a row pattern's
        WITHIN: :attr:`ananke.query.ProvSink.hold`). None before its first batch with one."""
        wm = progress_watermark(self.streaming.lastProgress) if self.streaming is not None else None
        if wm is not None and wm.year > 1970:
            wm = wm - self.sink.hold
        if wm is not None and wm.year > 1970 and (self._emitted_wm is None or wm > self._emitted_wm):
            self._emitted_wm = wm
        return self._emitted_wm

    def timings(self) -> dict[str, float]:
        """Driver seconds spent per phase of this query's batches (collect and ANK-1 from
        the provenance adapter; archive, wait, contexts, events from the Deploy Manager)."""
        out = {**(self.adapter.seconds if self.adapter is not None else {}), **self.seconds}
        return {k: round(v, 3) for k, v in out.items()}

    def start(self, checkpoint: str, trigger: str):
        writer = self.sink.with_ids().writeStream if self.adapter else self.sink.df.writeStream
        inner = self.adapter if self.adapter is not None else self._collect_and_deliver

        def fn(batch_df, batch_id: int) -> None:
            self._check_retired(batch_id)
            self._batch_started = time.time()  # wall clock: its events' archive waits count from its trigger tick
            sc = batch_df.sparkSession.sparkContext
            for sh in self.shared:  # the shared inputs' archive part of this batch's job
                sh.begin(sc, int(batch_id))
            try:
                inner(batch_df, batch_id)
            finally:
                for sh in self.shared:
                    sh.end(sc)
            self._commit_shared(int(batch_id))  # a replay that delivered nothing still commits

        self.started = time.time()  # wall clock, for the idle probe of the inputs its read archives
        self.stopped = False
        self.streaming = (writer.queryName(f"event_{self.query.name}").foreachBatch(fn)
                          .option("checkpointLocation", checkpoint).trigger(processingTime=trigger).start())
        if self.adapter is not None:
            self.adapter.attach(self.streaming)
        if self.resolver is not None:
            self.resolver.start()
        if self.ankn is not None:
            self.ankn_streaming = self.ankn.start(checkpoint + "-ankn", {"processingTime": trigger},
                                                  f"ankn_{self.query.name}")
        return self.streaming

    def stop(self, grace: float | None = None) -> None:
        """Stop the query (and ANK-N's) between micro-batches, within ``grace`` seconds
        (default ``spark.stop_grace``). The window resolver's background summaries
        stop on every way out, a failed stop of a streaming query too (raised after)."""
        grace = self.spark_settings.stop_grace.total_seconds() if grace is None else grace
        try:
            if self.streaming is not None:
                stop_between_batches(self.streaming, grace)
                self.streaming = None
            self.stopped = True
            for sh in self.shared:  # the other event-queries' waits on what its read archived end now
                self.sources.reader_stopped(sh.stream)
            if self.ankn_streaming is not None:
                stop_between_batches(self.ankn_streaming, grace)
                self.ankn_streaming = None
        finally:
            if self.resolver is not None:
                self.resolver.stop()

    def _put_polys(self, rows: list) -> None:
        """A batch's alert polynomials into ``ank_poly`` (keyed: a replay adds nothing)."""
        self.polys.put(self.query.name, rows)

    def _collect_and_deliver(self, batch_df, batch_id: int) -> None:
        cols = [c for c in batch_df.columns if c not in (PROV, "_sink_id")]
        self._deliver(batch_df.select(*cols).toArrow().to_pandas(), batch_id)

    def _commit_shared(self, batch_id: int) -> None:
        """Commit this batch of the inputs the query's read archived (once), and tell the
        source registry, so archive waits on them (the events', other queries') go on."""
        for sh in self.shared:
            result = sh.commit(batch_id)
            if result is not None:
                self.sources.shared_committed(sh.stream, result, self._batch_started)

    def _check_retired(self, batch_id: int) -> None:
        if self.retired:
            raise QueryRetired(f"event-query {self.query.name!r} is being retired; micro-batch {batch_id} is left "
                               "uncommitted")

    def _deliver(self, frame: pd.DataFrame, batch_id: int) -> None:
        """The batch's events (collected once, with their provenance when ANK-1 runs).
        The shared inputs' part of the batch is committed first: the events' contexts and
        the window digests' resolution read it."""
        self._check_retired(batch_id)
        t0 = time.perf_counter()
        self._commit_shared(int(batch_id))
        # most batches detect nothing: an empty one is not logged (no row a replay could repeat)
        result = self.archiver.append(self.stream, int(batch_id), frame, key=self.query.eid) if len(frame) else None
        self.seconds["archive"] += time.perf_counter() - t0
        if result is None:
            return
        keep = storable_rows(frame)  # events with text PostgreSQL cannot hold are dead letters, not alerts
        if not keep.all():
            frame = frame[keep].reset_index(drop=True)
        if len(frame):
            frame[self.query.ts] = pd.to_datetime(frame[self.query.ts], utc=True)
            self.events_seen += len(frame)
            self.on_events(self, frame, int(batch_id), replay=result.duplicate, started=self._batch_started)
