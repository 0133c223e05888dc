"""A source read once, for its archive and for the event-query that reads it (issue 11 §2).

Normally each source has a streaming query of its own that archives it (M 4.1,
:mod:`archive.spark_sink`), and an event-query reads the source again. Two reads cost
the source twice (the scenario's Python source generates every row twice), and a source
that is not replayable (one that samples a machine, say) gives the two queries
different tuples: the event-query's provenance then names tuples the archive never
held.

A *shared read* puts the archive's partition writers inside the event-query's plan:
the source, cast to the archive's layout, goes through :class:`archive.exec_sink.PassThrough`
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

The first batch cannot be seen before it is written (it is written as the query reads
it), so a shared source does not get an interval chosen from its rate: it takes its
configured interval, else ``chunk_span`` (:meth:`archive.archiver.Archiver.fix_interval`
with no rows).
"""

from __future__ import annotations

import os
import zlib
from datetime import timedelta
from pathlib import Path

from archive.abc import AppendResult
from archive.exec_sink import PassThrough, batch_property, shared_property

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


def claim(checkpoint: Path, owner: str) -> str | None:
    """Whether ``owner`` may archive the source whose own archive query checkpoints at
    ``checkpoint``: yes if it did before (the marker names it), or if no one ever
    archived the source (no marker, no checkpoint); returns the marker's other owner
    or ``"its own query"`` when not."""
    marker = checkpoint / MARKER
    if marker.exists():
        found = marker.read_text().strip()
        return None if found == owner else found
    if (checkpoint / "offsets").exists():
        return "its own query"
    return None


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
        from archive.spark_sink import EXECUTOR_DSN_ENV

        self.archiver = archiver
        self.stream = stream
        self.owner = owner
        spec = archiver.stream(stream)
        dsn = executor_dsn or os.environ.get(EXECUTOR_DSN_ENV) or archiver.db.dsn
        self.writer = PassThrough(dsn, archiver.db.schema, spec, after_part, archiver.db.retry_seconds)
        self._committed = -1

    def plan(self, df):
        """``df`` (the source in the archive's layout, :func:`archive.spark_sink.archive_layout`)
        through the partition writers, rows and schema unchanged."""
        return df.mapInArrow(self.writer, df.schema)

    def begin(self, sc, batch_id: int) -> None:
        """Before micro-batch ``batch_id``'s job: its part of the job, for the tasks."""
        bid = shared_batch_id(self.owner, batch_id)
        if not self.archiver.has_interval(self.stream):  # see the module docstring
            self.archiver.fix_interval(self.stream, 0, timedelta(0))
        span_us = self.archiver.grid_of(self.stream).span_us
        skip = self.archiver.batch_done(self.stream, bid)
        sc.setLocalProperty(shared_property(self.stream),
                            batch_property(bid, span_us, self.archiver.horizon(self.stream), skip=skip))

    def end(self, sc) -> None:
        sc.setLocalProperty(shared_property(self.stream), None)

    def commit(self, batch_id: int) -> AppendResult | None:
        """After the job: commit the batch (once; None if it was committed already)."""
        if batch_id <= self._committed:
            return None
        result = self.archiver.commit_parts(self.stream, shared_batch_id(self.owner, batch_id))
        self._committed = batch_id
        return result
