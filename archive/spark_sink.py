"""The Archive sink: a foreachBatch writer that archives a streaming DataFrame (M 4.1;
docs/ARCHITECTURE.md, a row from its source to the archive). The Spark side of the
archive, with :mod:`archive.exec_udf`: ``pyspark`` is imported inside the functions
that need it.

Each micro-batch is cast to the stream's archive types and given its deterministic
source ids by Spark itself (``xxhash64``, the same function :mod:`archive.ids` computes
in Python); then each partition COPYs its own rows from its executor
(:mod:`archive.exec_sink`), creating first any chunk its rows reach that does not exist
yet, so each batch is one Spark job. Spark replays an unfinished batch with the same id
after a restart from its checkpoint; the per-partition records make the partitions
already written no-ops, and the batch log makes a committed batch one: exactly-once.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from archive.abc import AppendResult
from archive.archiver import Archiver
from archive.chunks import Evidence
from archive.exec_udf import BATCH_PROPERTY, EXECUTOR_DSN_ENV, SUMMARY_SCHEMA, StreamWriter, batch_property
from archive.ids import spark_source_id
from archive.streams import StreamSpec
from archive.types import ColumnType, from_spark

_SPARK_TYPES = {
    ColumnType.BIGINT: "bigint", ColumnType.DOUBLE: "double", ColumnType.TEXT: "string",
    ColumnType.BOOLEAN: "boolean", ColumnType.TIMESTAMPTZ: "timestamp",
}


def spec_from_spark_schema(name: str, schema, ts_col: str, kind: str = "raw", **kw) -> StreamSpec:
    """A StreamSpec for a Spark DataFrame's schema (every column but the event time is payload)."""
    fields = {f.name: from_spark(f.dataType, f"stream {name!r} column {f.name!r}") for f in schema.fields}
    if ts_col not in fields:
        raise ValueError(f"stream {name!r} has no event-time column {ts_col!r} (columns: {sorted(fields)})")
    return StreamSpec.build(name, ts_col, fields, kind=kind, **kw)


def prepare_batch(df, spec: StreamSpec):
    """Cast a Spark DataFrame to the archive's types and add ``_sid``. Columns the stream
    does not have are kept, so the Archiver dead-letters the batch naming them."""
    from pyspark.sql import functions as F

    cols = []
    for name in df.columns:
        ctype = ColumnType.TIMESTAMPTZ if name == spec.ts_col else spec.columns.get(name)
        cols.append(F.col(name).cast(_SPARK_TYPES[ctype]).alias(name) if ctype else F.col(name))
    typed = df.select(*cols)
    if all(c in typed.columns for c, _ in spec.id_columns):
        typed = typed.withColumn("_sid", spark_source_id(spec.name, [c for c, _ in spec.id_columns]))
    return typed


def archive_layout(df, spec: StreamSpec):
    """``df`` cast to the archive's types, with ``_sid``, in the order the executors
    write (``_sid``, event time, payload). A streaming DataFrame given this shape once
    (:meth:`moirae.engine.engine.Engine.source` does) reaches :func:`archive_batches` ready:
    each micro-batch then goes to the executors as it is, without the projections
    that would make Spark analyse the batch's plan again (the larger part of a small
    batch's cost)."""
    return prepare_batch(df, spec).select("_sid", spec.ts_col, *spec.columns)


def _in_layout(df, spec: StreamSpec) -> bool:
    want = [("_sid", "bigint"), (spec.ts_col, "timestamp"), *((c, _SPARK_TYPES[t]) for c, t in spec.columns.items())]
    return df.dtypes == want


def archive_batches(archiver: Archiver, stream: str, on_batch: Callable | None = None,
                    executor_dsn: str | None = None,
                    after_part: Callable[[int, int], None] | None = None) -> Callable:
    """A ``foreachBatch`` function archiving each micro-batch into ``stream`` from the
    executors (:mod:`archive.exec_sink`): every partition COPYs its own rows.

    The driver never collects the batch. It skips a batch already in the batch log,
    runs the partition writers (one Spark job; each creates the new chunks its rows
    reach, then writes them, and returns one summary row), then commits the batch
    (:meth:`Archiver.commit_parts`). Should a partition still find a chunk missing
    (dropped by retention after it was created), the driver creates it and runs the
    writers again; the partitions already written are then no-ops.
    ``executor_dsn``: the DSN executors connect with (default: ``MOIRAE_EXECUTOR_PG_DSN``
    if set, else the archive's own).
    ``after_part(batch_id, part)`` runs on the executor after a partition commits (tests).
    ``on_batch(result, batch_df)`` (optional) runs on the driver after the whole batch
    committed, with the counts summed over partitions.
    """
    spec = archiver.stream(stream)
    expected = {"_sid", spec.ts_col, *spec.columns}
    dsn = executor_dsn or os.environ.get(EXECUTOR_DSN_ENV) or archiver.db.dsn
    writers = _Writers(StreamWriter(dsn, archiver.db.schema, spec, after_part, archiver.db.retry_seconds),
                       ["_sid", spec.ts_col, *spec.columns])

    def write(batch_df, batch_id: int) -> None:
        batch_id = int(batch_id)
        if archiver.batch_done(stream, batch_id):
            result = AppendResult(stream, batch_id, 0, 0, 0, True, ())
        else:
            typed = batch_df if _in_layout(batch_df, spec) else prepare_batch(batch_df, spec)
            if set(typed.columns) != expected:  # the whole batch is dead-lettered, naming the columns
                result = archiver.append(stream, batch_id, typed.toArrow())
            else:
                result = _write_from_executors(archiver, spec, typed, batch_id, _span_us(archiver, spec, typed),
                                               writers)
        if on_batch is not None:
            on_batch(result, batch_df)

    return write


def _span_us(archiver: Archiver, spec: StreamSpec, typed) -> int:
    """The stream's chunk interval in microseconds, settled first
    (:meth:`Archiver.settle_interval`). While it waits for a rate (none recorded, or
    only a guess), one small aggregate of the batch (rows, distinct instants, first and
    last event time) lets the Archiver choose it before the executors write, as its own
    append path does; that reads such a batch twice. An estimate is revised from the
    rows archived so far, as a shared read's is (:mod:`archive.shared`): the batch is
    written on the estimate's grid, and a revision moves it with the rest; so a young
    stream's micro-batch is one Spark job, not an aggregate's jobs and then the
    writers'. A final interval needs nothing."""
    if not archiver.interval_from_rate(spec.name):
        return archiver.settle_interval(spec.name).span_us
    from pyspark.sql import functions as F

    us = F.unix_micros(F.col(spec.ts_col))
    r = typed.agg(F.count(us).alias("n"), F.count_distinct(us).alias("d"), F.min(us).alias("lo"),
                  F.max(us).alias("hi")).first()
    if not r["n"]:
        return archiver.grid_of(spec.name).span_us
    return archiver.settle_interval(spec.name, Evidence(r["n"], r["d"], r["lo"], r["hi"])).span_us


class _Writers:
    """The stream's partition writers as one Python UDF column, made at the first batch
    and reused by every later one (see :class:`archive.exec_udf.StreamWriter`)."""

    def __init__(self, writer: StreamWriter, columns: list[str]) -> None:
        self.writer, self.columns = writer, columns
        self._column = None

    def run(self, typed, batch: str) -> list:
        """Run the writers over ``typed`` (in the stream's layout) for the batch whose
        property value is ``batch``: one Spark job; its summary rows."""
        from pyspark.sql import DataFrame

        if self._column is None:
            from pyspark.sql import functions as F
            from pyspark.sql.pandas.functions import pandas_udf
            from pyspark.util import PythonEvalType

            udf = pandas_udf(self.writer, returnType=SUMMARY_SCHEMA, functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
            self._column = udf(*[F.col(c) for c in self.columns])  # by name: it binds to each batch's plan
        session = typed.sparkSession
        sc = session.sparkContext
        sc.setLocalProperty(BATCH_PROPERTY, batch)  # this thread's jobs carry it to their tasks
        try:
            return DataFrame(typed._jdf.mapInArrow(self._column._jc, False, None), session).collect()
        finally:
            sc.setLocalProperty(BATCH_PROPERTY, None)


def _write_from_executors(archiver, spec, typed, batch_id, span_us, writers: _Writers):
    if not _in_layout(typed, spec):
        typed = typed.select(*writers.columns)
    created: set[int] = set()
    for _ in range(8):  # normally once: the executors create the chunks they need
        # the horizon as of now decides new chunks' tiers on the executors (see PartitionJob)
        batch = batch_property(batch_id, span_us, archiver.horizon(spec.name), bulk=False,
                               cluster=archiver.cluster_keys(spec.name))
        missing = {c for r in writers.run(typed, batch) for c in (r["missing"] or ())}
        if not missing:
            return archiver.commit_parts(spec.name, batch_id)
        if missing <= created:
            break
        archiver.ensure_chunks(spec.name, missing)
        created |= missing
    raise RuntimeError(f"stream {spec.name!r} batch {batch_id}: chunks {sorted(missing)} still missing after "
                       "creating them (dropped meanwhile by retention?)")


def spark_schema(spec: StreamSpec, with_ids: bool = False):
    """The Spark schema of a stream's archived rows (event time first, then payload)."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    fields = [StructField("_sid", _parse_datatype_string("bigint"))] if with_ids else []
    fields += [StructField(c, _parse_datatype_string(_SPARK_TYPES[t])) for c, t in spec.id_columns]
    return StructType(fields)


def to_spark(spark, frame, spec: StreamSpec, with_ids: bool = False):
    """A static Spark DataFrame of archived rows (as read by ``Archiver.read``)."""
    schema = spark_schema(spec, with_ids)
    if len(frame) == 0:
        return spark.createDataFrame([], schema)
    cols = [f.name for f in schema.fields]
    frame = frame[cols].copy()
    for c, t in spec.id_columns:
        if t is ColumnType.TIMESTAMPTZ and getattr(frame[c].dtype, "tz", None) is not None:
            # naive UTC (the session time zone is UTC): accepted by both the Arrow path and
            # Spark's row-by-row fallback, which refuses tz-aware pandas timestamps
            frame[c] = frame[c].dt.tz_convert("UTC").dt.tz_localize(None)
    clean = frame.astype(object).where(frame.notna(), None)
    return spark.createDataFrame(clean, schema)
