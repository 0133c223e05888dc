"""Feeding ANK-1 from Spark Structured Streaming (A 5.1 on PySpark).

:class:`Ank1SparkSink` is the ``foreachBatch`` function of one instrumented sink. For each
micro-batch it collects the sink tuples with their ids and provenance to the driver (one
Spark job, Arrow) and calls ``on_tuple``, then calls ``on_watermark`` with the watermark of the streaming query's
latest progress (``query.lastProgress["eventTime"]["watermark"]``).

Why the progress watermark is safe: the progress of batch N-1 reports the watermark W
Spark used in that batch; every stateful operator has by then emitted every window ending
at or before W, and later batches drop input older than W. Any sink tuple delivered later
therefore has an event time >= W, which is what Definition 2.1 asks of a sink watermark.
An operator that holds its outputs (a row pattern, :meth:`ananke.query.Provenanced.stateful`)
may emit a tuple up to its ``hold`` below that watermark, so the sink's watermark fed to
ANK-1 is the progress watermark minus the sink's hold (:attr:`ananke.query.ProvSink.hold`).
Inside batch N only batch N-1's progress is visible, so ANK-1 lags by one trigger;
:meth:`Ank1SparkSink.poll` feeds the newest watermark on demand (e.g. after
``processAllAvailable``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from ananke.abc import Resolver
from ananke.ank1 import Ank1Logic
from ananke.digest import Digest
from ananke.errors import ProvenanceError
from ananke.ids import PROV, from_micros
from ananke.items import SinkTuple
from ananke.poly_spark import ValueReader, sink_polys
from ananke.poly_writer import PolyWriter
from ananke.query import ProvSink

Deliver = Callable[[object, int], None]
#: takes a batch's ``(sink id, sink tuple time, Poly)`` (e.g. :meth:`ananke.poly_store.PolyStore.put`)
PolySink = Callable[[list], None]


def progress_watermark(progress: dict | None) -> datetime | None:
    """The event-time watermark in a streaming-query progress dict, if any.

    >>> progress_watermark({"eventTime": {"watermark": "2024-01-01T08:10:00.000Z"}})
    datetime.datetime(2024, 1, 1, 8, 10, tzinfo=datetime.timezone.utc)
    >>> progress_watermark({"eventTime": {}}) is None
    True
    """
    if not progress:
        return None
    wm = (progress.get("eventTime") or {}).get("watermark")
    if not wm:
        return None
    return datetime.fromisoformat(wm.replace("Z", "+00:00"))


def collect_sink_rows(sink: ProvSink, batch_df, resolve: Resolver | None = None
                      ) -> list[tuple[SinkTuple, list[tuple[int, datetime]]]]:
    """The batch's sink tuples (id, event time, payload) with their provenance lists."""
    return collect_batch(sink, batch_df, resolve)[1]


def collect_batch(sink: ProvSink, batch_df, resolve: Resolver | None = None):
    """One Spark job: the batch's sink rows as a pandas frame (payload and event time, as
    the sink's consumer sees them) and, for ANK-1, the same rows as sink tuples with their
    provenance lists. The rows leave the JVM as Arrow, once; a foreachBatch that ran a
    second action on a stateful batch would recompute the whole micro-batch, state
    included.

    A batch that already carries ``_sink_id`` (the streaming DataFrame of
    :meth:`~ananke.query.ProvSink.with_ids`, as the engine and :meth:`Ank1SparkSink.start`
    run it) is collected as it is: no new projection, so Spark does not analyse and
    optimise the query's whole plan once more every batch. Event times and the provenance pairs become microseconds in Arrow.

    A sink whose provenance is window digests (``sink.digest``) needs ``resolve``, which
    turns them into the source tuples (:mod:`ananke.digest`)."""
    if sink.digest is not None and resolve is None:
        raise ProvenanceError(f"sink {sink.name!r} carries window digests: give a resolver (ananke.digest)")
    frame, table = _collect(sink, batch_df)
    return frame, sink_rows(sink, table, resolve)


def _collect(sink: ProvSink, batch_df):
    """The batch as Arrow (one Spark job) and its payload and event time as pandas."""
    from pyspark.sql import functions as F

    payload = sink.payload_columns
    if "_sink_id" in batch_df.columns:
        table = batch_df.toArrow()
    else:  # one projection (one more analysis of the plan) adds the ids
        table = batch_df.select(*payload, F.col(sink.ts), F.col(PROV), _sink_id_expr(sink).alias("_sink_id")).toArrow()
    return table.select([*payload, sink.ts]).to_pandas(), table


def sink_rows(sink: ProvSink, table, resolve: Resolver | None = None
              ) -> list[tuple[SinkTuple, list[tuple[int, datetime]]]]:
    """The sink tuples of a collected batch with their provenance lists (window digests
    resolved by ``resolve``)."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return []
    if sink.digest is not None:
        return _resolved(sink, table, resolve)
    payload = sink.payload_columns
    prov = table.column(PROV).combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(prov), 0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(prov)
    ids = flat.field("id").to_pylist()
    uss = _micros(flat.field("ts")).to_pylist()
    sink_ids = table.column("_sink_id").to_pylist()
    ts_us = _micros(table.column(sink.ts).combine_chunks()).to_pylist()
    records = table.select(payload).to_pylist()
    out, pos = [], 0
    for i, n in enumerate(lengths):
        st = SinkTuple(sink_ids[i], from_micros(ts_us[i]), records[i])
        out.append((st, [(ids[j], from_micros(uss[j])) for j in range(pos, pos + int(n))]))
        pos += int(n)
    return out


def _resolved(sink: ProvSink, table, resolve: Resolver) -> list[tuple[SinkTuple, list[tuple[int, datetime]]]]:
    """The sink tuples of ``table`` with the provenance their window digests resolve to."""
    payload = sink.payload_columns
    prov = table.column(PROV).combine_chunks()
    keys = prov.field("k")
    key_cols = [keys.field(i).to_pylist() for i in range(keys.type.num_fields)]
    digests = [Digest(tuple(col[i] for col in key_cols), lo, hi, n, x) for i, (lo, hi, n, x) in enumerate(zip(
        _micros(prov.field("lo")).to_pylist(), _micros(prov.field("hi")).to_pylist(),
        prov.field("n").to_pylist(), prov.field("x").to_pylist(), strict=True))]
    lists = resolve(sink.digest, digests)
    sink_ids = table.column("_sink_id").to_pylist()
    ts_us = _micros(table.column(sink.ts).combine_chunks()).to_pylist()
    records = table.select(payload).to_pylist()
    return [(SinkTuple(sink_ids[i], from_micros(ts_us[i]), records[i]), lists[i]) for i in range(table.num_rows)]


def _micros(arr):
    """A timestamp array as int64 microseconds since the epoch (UTC), as ``unix_micros``.

    >>> import pyarrow as pa
    >>> _micros(pa.array([1_500_000], pa.timestamp("ns", tz="UTC"))).to_pylist()
    [1500]
    """
    import pyarrow as pa

    t = arr.type
    if not pa.types.is_timestamp(t):
        raise TypeError(f"expected a timestamp column, got {t}")
    if t.unit != "us":
        arr = arr.cast(pa.timestamp("us", tz=t.tz))
    return arr.cast(pa.int64())


def _sink_id_expr(sink: ProvSink):
    from ananke.ids import sink_id_col

    return sink_id_col(sink.name, sink.ts, sink.payload_columns)


class Ank1SparkSink:
    """``foreachBatch`` function feeding one sink's tuples and watermark to ANK-1.

    ``deliver(batch_df, batch_id)``, if given, is called first with the batch (the sink's
    own consumer, e.g. the alert store); ``deliver_frame(frame, batch_id)`` instead gets
    the batch's rows as pandas, collected in the same Spark job as the provenance, so the
    batch is computed once. Batches with an id not above the last one seen
    are run without delivering anything (a replay in the same process). Call :meth:`attach` with the started
    query so the watermark can be read; :meth:`start` does both. ``polys(rows)``, if given
    and the sink keeps polynomials, gets each batch's sink-tuple polynomials
    (:func:`ananke.poly_spark.sink_polys`), built and stored on a thread of their own while
    ANK-1 runs (:class:`ananke.poly_writer.PolyWriter`): ANK-1's graph is written only
    after them, so a source vertex never names an alert whose polynomial is missing, and
    the batch returns (Spark commits it) only once they are stored.
    """

    def __init__(self, sink: ProvSink, logic: Ank1Logic, deliver: Deliver | None = None,
                 deliver_frame: Deliver | None = None, resolve: Resolver | None = None,
                 polys: PolySink | None = None, values: ValueReader | None = None) -> None:
        if sink.digest is not None and resolve is None:
            raise ProvenanceError(f"sink {sink.name!r} carries window digests: give a resolver (ananke.digest)")
        self.sink = sink
        self.resolve = resolve
        self.logic = logic
        self.deliver = deliver
        self.deliver_frame = deliver_frame
        self.seconds = {"collect": 0.0, "resolve": 0.0, "ank1": 0.0}  # driver time per phase, summed over batches
        #: polynomials (ananke.polynomial): ``polys(rows)`` gets each batch's (sink id, time, Poly),
        #: before ANK-1's graph; ``values`` reads a digest window's values from the archive
        self.polys = polys if sink.poly is not None else None
        self.values = values
        #: builds and stores each batch's polynomials beside ANK-1's work; the graph's
        #: writes and the batch's end wait for it (ananke.poly_writer)
        self.poly_writer = PolyWriter(self._store_polys) if self.polys is not None else None
        if self.poly_writer is not None:
            logic.emit = self.poly_writer.gate(logic.emit) if logic.emit is not None else None
        self.query = None
        self._hold = sink.hold
        self.last_batch = -1
        self.rows = 0

    def __call__(self, batch_df, batch_id: int) -> None:
        if batch_id <= self.last_batch:
            # a replay in this process (the query restarted from its checkpoint after the
            # batch ran but before Spark committed it): ANK-1 has seen it, yet the batch
            # is still run to its end, because a stateful query's state stores commit only
            # when every partition was processed (Spark fails the query otherwise)
            batch_df.write.format("noop").mode("overwrite").save()
            if self.poly_writer is not None:  # polynomials a failed attempt left unstored, then its graph
                self.poly_writer.wait()
                with self.logic.lock:
                    self.logic.flush()
            return
        if self.deliver is not None:
            self.deliver(batch_df, batch_id)
        t0 = time.perf_counter()
        frame, table = _collect(self.sink, batch_df)
        self.seconds["collect"] += time.perf_counter() - t0
        if self.deliver_frame is not None:  # the events first: resolving digests may wait for the archive
            self.deliver_frame(frame, batch_id)
        t0 = time.perf_counter()
        rows = sink_rows(self.sink, table, self.resolve)
        self.seconds["resolve"] += time.perf_counter() - t0
        if self.poly_writer is not None and rows:
            self.poly_writer.submit((table, rows))
        t0 = time.perf_counter()
        with self.logic.lock, self.logic.batched():  # the batch's graph in one transaction
            for st, prov in rows:
                self.logic.on_tuple(self.sink.name, st, prov)
            self.rows += len(rows)
            self.last_batch = batch_id
            self.poll()
        self.seconds["ank1"] += time.perf_counter() - t0
        if self.poly_writer is not None:  # stored before Spark commits the batch
            self.poly_writer.wait()
            self.seconds.update(self.poly_writer.seconds)

    def _store_polys(self, batch) -> None:
        """One batch's sink-tuple polynomials, built and handed to ``polys``."""
        table, rows = batch
        self.polys(sink_polys(self.sink.poly, table, rows, self.values))

    def attach(self, query) -> None:
        self.query = query

    def poll(self) -> datetime | None:
        """Feed the sink's watermark (the query's latest progress watermark less the
        sink's hold, module doc) to ANK-1; return it (or None)."""
        if self.query is None:
            return None
        wm = progress_watermark(self.query.lastProgress)
        if wm is not None:
            wm = wm - self._hold
            with self.logic.lock:
                self.logic.on_watermark(self.sink.name, wm)
        return wm

    def start(self, checkpoint: str | None = None, trigger: dict | None = None, query_name: str | None = None):
        """Start the sink's streaming query with this function as foreachBatch."""
        writer = self.sink.with_ids().writeStream.foreachBatch(self)
        if checkpoint:
            writer = writer.option("checkpointLocation", checkpoint)
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        query = writer.start()
        self.attach(query)
        return query
