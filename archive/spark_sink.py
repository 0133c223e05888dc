"""The Archive sink: a foreachBatch writer that archives a streaming DataFrame (M 4.1,
DESIGN.md §4 flow 1).

Each micro-batch is cast to the stream's archive types, given its deterministic source
ids by Spark itself (``xxhash64``, the same function :mod:`archive.ids` computes in
Python), pulled to the driver as Arrow and appended with its batch id. Spark replays an
unfinished batch with the same id after a restart from its checkpoint, and the batch log
turns that replay into a no-op: exactly-once.
"""

from __future__ import annotations

from collections.abc import Callable

from archive.archiver import Archiver
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


def archive_batches(archiver: Archiver, stream: str,
                    on_batch: Callable | None = None) -> Callable:
    """A ``foreachBatch`` function archiving each micro-batch into ``stream``.

    ``on_batch(result, batch_df)`` (optional) runs after the append commits, so the
    engine can feed the same batch to provenance or event detection.
    """
    spec = archiver.stream(stream)

    def write(batch_df, batch_id: int) -> None:
        typed = prepare_batch(batch_df, spec)
        table = typed.toArrow()
        result = archiver.append(stream, int(batch_id), table)
        if on_batch is not None:
            on_batch(result, batch_df)

    return write


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
