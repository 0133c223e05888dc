"""The Spark side of the executors' write path: the objects Spark runs in its Python
workers (``mapInArrow`` functions), and the local properties that carry each
micro-batch's part of the job to its tasks.

Each task archives its partition with :func:`archive.exec_stream.write_arriving` (as the
rows arrive, else once the partition is whole, :mod:`archive.exec_sink`) and hands back
one summary row (:data:`SUMMARY_SCHEMA`). ``pyspark`` is imported here only inside the
functions Spark calls, so the driver's PostgreSQL side never loads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from archive.exec_sink import PartitionJob, write_with_retry
from archive.exec_stream import write_arriving
from archive.streams import StreamSpec

EXECUTOR_DSN_ENV = "MOIRAE_EXECUTOR_PG_DSN"
"""A DSN the executors reach the archive's PostgreSQL by, when the driver's is not theirs."""

#: What each partition hands back to the driver (one row per partition).
SUMMARY_SCHEMA = "part int, rows bigint, dead_letters bigint, duplicate boolean, missing array<bigint>"
_SUMMARY = pa.schema([("part", pa.int32()), ("rows", pa.int64()), ("dead_letters", pa.int64()),
                      ("duplicate", pa.bool_()), ("missing", pa.list_(pa.int64()))])


def run_job(job: PartitionJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Archive this task's partition of ``job`` from ``batches``; yield its summary row."""
    from pyspark import TaskContext

    part = TaskContext.get().partitionId()
    rows, dead, dup, missing = write_arriving(job, part, batches)[0]
    if job.after_commit is not None and not missing:
        job.after_commit(job.batch_id, part)
    yield pa.RecordBatch.from_pydict({"part": [part], "rows": [rows], "dead_letters": [dead],
                                      "duplicate": [dup], "missing": [missing]}, schema=_SUMMARY)


#: The local property that carries a micro-batch's part of the job to its tasks.
BATCH_PROPERTY = "moirae.archive.batch"


@dataclass(frozen=True)
class StreamWriter:
    """The part of a :class:`PartitionJob` that stays the same for every micro-batch of
    one stream. The driver wraps it in one Python UDF per stream, made once; each batch
    sets the rest (batch id, chunk interval, horizon) as the Spark local property
    :data:`BATCH_PROPERTY` of the thread that runs the batch's job (:func:`batch_property`),
    and every task reads it back from its ``TaskContext``. A new UDF per batch had cost
    the driver some 20 Py4J round trips, a pickling and a schema parse each time."""

    dsn: str
    schema: str | None
    spec: StreamSpec
    after_commit: Callable[[int, int], None] | None = None
    retry_seconds: float = 60.0

    def job(self, batch: str | None) -> PartitionJob:
        """The whole job, from the batch's property value (refused if absent: a partition
        must never be written under a batch id it was not given)."""
        if not batch:
            raise RuntimeError(f"stream {self.spec.name!r}: the task has no local property {BATCH_PROPERTY!r} "
                               "(the batch's job was not started by the archive sink)")
        b = json.loads(batch)
        horizon = datetime.fromisoformat(b["horizon"]) if b.get("horizon") else None
        return PartitionJob(self.dsn, self.schema, self.spec, int(b["batch_id"]), int(b["span_us"]),
                            self.after_commit, self.retry_seconds, horizon=horizon, bulk=bool(b.get("bulk")),
                            skip=bool(b.get("skip")), cluster=tuple(b.get("cluster") or ()))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        yield from run_job(self.job(TaskContext.get().getLocalProperty(BATCH_PROPERTY)), batches)


def shared_property(stream: str) -> str:
    """The local property carrying a micro-batch's job to the :class:`PassThrough` writer
    of ``stream`` (one per stream: one event-query may archive several of its inputs).

    >>> shared_property("metrics")
    'moirae.archive.batch.metrics'
    """
    return f"{BATCH_PROPERTY}.{stream}"


@dataclass(frozen=True)
class PassThrough(StreamWriter):
    """A :class:`StreamWriter` inside an event-query's own plan (a shared read, see
    :mod:`archive.shared`): each partition of the source is archived as above, exactly
    once, as its rows arrive (:func:`write_arriving`), then handed on unchanged to the
    query's next operator, so the source is read once for both the archive and the
    query, and both see the same tuples.

    Its job comes in the local property :func:`shared_property` of the stream. A chunk
    still missing when the rows are written (dropped by retention after the partition
    created it) is created again, a few times, here: the batch cannot be run again by
    the driver, since the same job also runs the query's stateful operators."""

    attempts: int = 5

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        job = self.job(ctx.getLocalProperty(shared_property(self.spec.name)))
        part = ctx.partitionId()
        if job.skip:  # an earlier run of this micro-batch archived it: the rows only go on
            yield from batches
            return
        (_, _, _, missing), received = write_arriving(job, part, batches)
        if missing and sum(b.num_rows for b in received):
            table = pa.Table.from_batches(received)
            for _ in range(self.attempts):
                missing = write_with_retry(job, part, table)[3]
                if not missing:
                    break
            else:
                raise RuntimeError(f"stream {self.spec.name!r} batch {job.batch_id} part {part}: chunks "
                                   f"{missing} dropped again each time they were created (retention?)")
        if self.after_commit is not None:
            self.after_commit(job.batch_id, part)
        yield from received


def batch_property(batch_id: int, span_us: int, horizon: datetime | None, bulk: bool = False,
                   skip: bool = False, cluster: tuple[str, ...] = ()) -> str:
    """The value of :data:`BATCH_PROPERTY` for one micro-batch; ``cluster``: the stream's
    cluster keys (:meth:`archive.archiver.Archiver.cluster_keys`).

    >>> batch_property(7, 3_600_000_000, None, cluster=("sid",))
    '{"batch_id": 7, "span_us": 3600000000, "horizon": null, "bulk": false, "skip": false, "cluster": ["sid"]}'
    """
    return json.dumps({"batch_id": int(batch_id), "span_us": int(span_us),
                       "horizon": None if horizon is None else horizon.isoformat(), "bulk": bool(bulk),
                       "skip": bool(skip), "cluster": list(cluster)})
