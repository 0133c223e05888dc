"""A source read once, for its archive and for the event-query that reads it.

Normally each source has a streaming query of its own that archives it (M 4.1,
:mod:`archive.spark_sink`), and an event-query reads the source again. Two reads cost
the source twice (the scenario's Python source generates every row twice), and a source
that is not replayable (one that samples a machine, say) gives the two queries
different tuples: the event-query's provenance then names tuples the archive never
held.

A *shared read* puts the archive's partition writers inside the event-query's plan:
the source, cast to the archive's layout, goes through :class:`archive.exec_udf.PassThrough`
(each partition COPYs its rows, exactly once, and hands them on), then on to the
query. Spark runs the whole plan in the one job the event-query's ``foreachBatch``
starts, so by the time that job returns the batch's rows are in the archive, and the
driver commits the batch (:meth:`SharedArchive.commit`) before it handles the events.
An archive wait for such a source then never waits on another query.

Batch ids. The archive's batches of a shared source are the event-query's micro-batches,
under ids of their own (:func:`shared_batch_id`): the owner's name picks a block of
2^40 ids, so they never meet the ids of the source's own archive query, nor those of
another owner. The choice of owner is kept beside the source's checkpoint
(:func:`claim`), so a restart archives the source the same way: a source switched from
one reader to another mid-stream would lose or repeat what the two had read apart.

A stream's chunk interval is chosen from the rate of its rows (:func:`archive.chunks.settle`),
and the partitions of a shared read write their rows as the query reads them, before
anyone has seen the batch. So while the interval waits for a rate (none recorded, or
only a guess from a batch of one instant), the partitions COPY their rows into the
stream's stage table (:func:`archive.names.stage_name`), exactly once as ever; the driver
then archives the staged batch through :meth:`archive.archiver.Archiver.append`, which
chooses (or revises) the interval from those rows, creates the chunks and logs the
batch, and empties the stage. Once an estimate is recorded the partitions write on its
grid, and :meth:`SharedArchive.begin` revises it from the rows archived so far while it
is provisional. A stream with a configured interval, or ``chunk_target_rows: 0``, fixes
its interval at once and never stages.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from archive.abc import AppendResult
from archive.exec_udf import EXECUTOR_DSN_ENV, PassThrough, batch_property, shared_property
from archive.names import quote, stage_name
from archive.schema import stage_table_ddl
from archive.stage_read import read_rows
from archive.types import ColumnType

MARKER = "archived_by"
"""The file, in a source's checkpoint directory, naming the event-query that archives it."""

_BLOCK = 1 << 40


def shared_batch_id(owner: str, batch_id: int) -> int:
    """The archive's batch id for micro-batch ``batch_id`` of event-query ``owner``: a block
    of 2^40 ids per owner, above every id a source's own archive query uses.

    >>> shared_batch_id("overload", 0) == shared_batch_id("overload", 0)
    True
    >>> shared_batch_id("overload", 7) - shared_batch_id("overload", 0)
    7
    >>> shared_batch_id("overload", 0) >= 1 << 40
    True
    """
    return ((1 + zlib.crc32(owner.encode()) % 4095) * _BLOCK) + int(batch_id)


def recorded_owner(checkpoint: Path) -> str | None:
    """The event-query the marker beside the source's checkpoint names, if any."""
    marker = checkpoint / MARKER
    return marker.read_text().strip() if marker.exists() else None


def claim(checkpoint: Path, owner: str) -> str | None:
    """Whether ``owner`` may archive the source whose own archive query checkpoints at
    ``checkpoint``: yes (None) if it did before (the marker names it), or if no one ever
    archived the source (no marker, no checkpoint); else the marker's other owner, or
    ``"its own query"``."""
    found = recorded_owner(checkpoint)
    if found is not None:
        return None if found == owner else found
    return "its own query" if (checkpoint / "offsets").exists() else None


def record_claim(checkpoint: Path, owner: str) -> None:
    """Write the marker (atomically) before the first shared batch."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    tmp = checkpoint / f".{MARKER}.tmp"
    tmp.write_text(owner + "\n")
    os.replace(tmp, checkpoint / MARKER)


class SharedArchive:
    """The archive's part of one source inside one event-query: the pass-through plan,
    and each micro-batch's begin and commit on the driver."""

    def __init__(self, archiver, stream: str, owner: str, executor_dsn: str | None = None,
                 after_part=None) -> None:
        self.archiver = archiver
        self.stream = stream
        self.owner = owner
        spec = archiver.stream(stream)
        dsn = executor_dsn or os.environ.get(EXECUTOR_DSN_ENV) or archiver.db.dsn
        self.writer = PassThrough(dsn, archiver.db.schema, spec, after_part, archiver.db.retry_seconds)
        self._committed = -1
        self._staged: set[int] = set()  # micro-batches begun without an interval (staged)

    def plan(self, df):
        """``df`` (the source in the archive's layout, :func:`archive.spark_sink.archive_layout`)
        through the partition writers, rows and schema unchanged."""
        return df.mapInArrow(self.writer, df.schema)

    def begin(self, sc, batch_id: int) -> None:
        """Before micro-batch ``batch_id``'s job: its part of the job, for the tasks."""
        bid = shared_batch_id(self.owner, batch_id)
        arch = self.archiver
        if arch.interval_from_rate(self.stream):  # see the module docstring
            self._ensure_stage()
            span_us = 0  # stage: the interval comes from this batch's rows
            self._staged.add(batch_id)
        else:  # fixed, or an estimate revised from the rows archived so far
            span_us = arch.settle_interval(self.stream).span_us
            self._staged.discard(batch_id)
        # a batch id above the last one this process committed is not in the log (the
        # owner's ids follow its micro-batches); only a restart's first batch must ask
        skip = batch_id <= self._committed or (self._committed < 0 and arch.batch_done(self.stream, bid))
        sc.setLocalProperty(shared_property(self.stream),
                            batch_property(bid, span_us, self.archiver.horizon(self.stream), skip=skip,
                                           cluster=arch.cluster_keys(self.stream)))

    def end(self, sc) -> None:
        sc.setLocalProperty(shared_property(self.stream), None)

    def commit(self, batch_id: int) -> AppendResult | None:
        """After the job: commit the batch (once; None if it was committed already)."""
        if batch_id <= self._committed:
            return None
        bid = shared_batch_id(self.owner, batch_id)
        if batch_id in self._staged:
            result = self._commit_staged(bid)
            self._staged.discard(batch_id)
        else:
            result = self.archiver.commit_parts(self.stream, bid)
        self._committed = batch_id
        return result

    def _ensure_stage(self) -> None:
        spec = self.archiver.stream(self.stream)
        cols = ["_sid", "_batch", *(c for c, _ in spec.id_columns)]
        with self.archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute(stage_table_ddl(self.stream, cols))

    def _commit_staged(self, bid: int) -> AppendResult:
        """Archive the staged batch ``bid`` through the Archiver's own append (the interval
        chosen from its rows, its chunks, the batch log, in one transaction), then empty
        the stage of it. A crash between the two leaves the batch's rows in the stage,
        unread: the batch is logged, so its replay writes nothing anywhere."""
        spec = self.archiver.stream(self.stream)
        names = ["_sid", *(c for c, _ in spec.id_columns)]
        types = {"_sid": ColumnType.BIGINT, **dict(spec.id_columns)}
        # one COPY parsed by Arrow (archive.stage_read): a first batch may be a whole backlog,
        # and its rows read as Python tuples cost several times the COPY that wrote them
        with self.archiver.db.connection() as conn, conn.cursor() as cur:
            table = read_rows(cur, stage_name(self.stream), names, types, "_batch = %s", (bid,))
        result = self.archiver.append(self.stream, bid, table)
        with self.archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute(f"DELETE FROM {quote(stage_name(self.stream))} WHERE _batch = %s", (bid,))
            cur.execute("DELETE FROM moirae_batch_parts WHERE stream = %s AND batch_id = %s", (self.stream, bid))
        return result
