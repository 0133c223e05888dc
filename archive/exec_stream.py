"""A partition's rows COPYed as they arrive from the JVM, not after the last.

:func:`archive.exec_sink.write_partition` starts writing once the whole partition has
reached the Python worker: the JVM produces the rows, then PostgreSQL inserts them,
one after the other, each leaving the other's core idle. Here each Arrow batch the JVM hands over (at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows) is split by chunk, encoded and
sent into an open COPY of its chunk while the JVM produces the next, in the one data
transaction of the partition: one COPY per chunk the partition reaches, not one per
Arrow batch (:func:`write_streamed`).

Exactly-once is kept as in :mod:`archive.exec_sink`: the partition's
``moirae_batch_parts`` row is inserted before its first row (a partition written before
is found at once and nothing is written), and updated with the counts before the
commit. A batch reaching a chunk not in the catalog has it created on a connection of
its own, committed at once, while the data transaction stays open
(:func:`create_beside`): attaching a partition does not wait for the transactions
writing the stream's other chunks, so a partition reaching a new chunk goes on
streaming rather than being written a second time the whole-partition way.

Rows to be clustered by keys (:func:`archive.contributors.cluster_by`) are sorted and
COPYed a block of at least :data:`CLUSTER_BLOCK_ROWS` rows at a time (:func:`blocks`),
not after the whole partition: a partition of up to that many rows is still one sorted
run, and a larger one is a few runs, each as long as a BRIN range needs.

The streamed path writes one piece (piece 0). It still gives up before the first write
or rolls back when a batch reaches more chunks than one transaction may lock (the
whole-partition way then writes it in several pieces), when a chunk's creation waits for a
lock too long (:data:`CREATE_LOCK_TIMEOUT_MS`), for rows without a chunk interval
(staged), and when its connection broke: the whole partition then goes the way it
always went (with its retries).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from archive import chunks as chunk_sql
from archive.copy import arrow_to_copy_rows, copy_binary_stream
from archive.exec_sink import (
    PartitionJob,
    by_chunk,
    catalog_tiers,
    connect,
    create_missing,
    drop_worker_connection,
    sort_by,
    split_arrow,
    worker_connection,
    write_with_retry,
)
from archive.names import partition_name
from archive.validate import insert_dead_letters


def streamable(job: PartitionJob) -> bool:
    """Whether ``job``'s partitions may be written as they arrive (module doc)."""
    return job.span_us > 0 and not job.skip


CLUSTER_BLOCK_ROWS = 200_000
"""Rows of a clustered stream's partition sorted and COPYed at a time (whole arriving
batches, at least this many). With 1000 keys a block holds about 200 rows of each key,
1.6 heap pages, so a BRIN range (32 pages) holds about 20 keys and a read of one key
reads one or two ranges of each block. Writing blocks as they arrive, rather than
sorting the whole partition once it has arrived, keeps the COPY beside the JVM's work
(BENCHMARKS.md, engine_jvm's provenance configuration)."""


def blocks(job: PartitionJob, batches: Iterator[pa.RecordBatch], received: list[pa.RecordBatch],
           block_rows: int) -> Iterator[pa.Table]:
    """The tables to write as ``batches`` arrive, each batch also appended to
    ``received``: each batch, or for a clustered stream blocks of whole batches with at
    least ``block_rows`` rows (the writer passes :data:`CLUSTER_BLOCK_ROWS`), which the
    writer sorts.

    >>> from archive.streams import StreamSpec
    >>> job = PartitionJob("", None, StreamSpec.build("m", "ts", {"k": "bigint"}), 1, 60_000_000, cluster=("k",))
    >>> arriving = [pa.record_batch({"k": [3, 1]}), pa.record_batch({"k": [2]}), pa.record_batch({"k": [0]})]
    >>> got = []
    >>> [t.column("k").to_pylist() for t in blocks(job, iter(arriving), got, 3)], len(got)
    ([[3, 1, 2], [0]], 3)
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        received.append(batch)
        if not job.cluster:
            yield pa.Table.from_batches([batch])
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= block_rows:
            yield pa.Table.from_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


class _Arriving:
    """A partition's rows as they arrive: each block checked (dead letters apart),
    sorted when clustered, split by chunk and encoded, then queued by chunk until a
    COPY sends it (:meth:`session`)."""

    def __init__(self, job: PartitionJob, batches: Iterator[pa.RecordBatch], received: list[pa.RecordBatch]) -> None:
        self.job = job
        self.blocks = blocks(job, batches, received, CLUSTER_BLOCK_ROWS)
        self.queued: dict[int, deque[bytes]] = {}  # chunk -> encoded rows not yet sent
        self.rows: dict[int, int] = {}  # chunk -> rows encoded
        self.new: list[int] = []  # chunks reached whose tier is not known yet
        self.dead: list = []
        self.max_us: int | None = None
        self.done = False

    def pull(self, tiers: dict[int, str]) -> None:
        """Take the next block (``done`` when there is none left)."""
        spec = self.job.spec
        block = next(self.blocks, None)
        if block is None:
            self.done = True
            return
        good, dead = split_arrow(block, spec)
        self.dead += dead
        if not good.num_rows:
            return
        good = sort_by(good, self.job.cluster)  # as write_partition does: BRIN then skips other keys' rows
        us = np.asarray(good.column(spec.ts_col).cast(pa.int64()))
        top = int(us.max())
        self.max_us = top if self.max_us is None else max(self.max_us, top)
        chunk_of = np.floor_divide(us, self.job.span_us)
        lo, hi = int(chunk_of.min()), int(chunk_of.max())
        ids = [lo] if lo == hi else np.unique(chunk_of).tolist()  # a block is mostly within one chunk
        good = good.append_column("_batch", pa.array(np.full(good.num_rows, self.job.batch_id, dtype=np.int64)))
        for cid, rows in by_chunk(good, chunk_of, ids):
            self.queued.setdefault(cid, deque()).append(arrow_to_copy_rows(rows, spec.stored_columns))
            self.rows[cid] = self.rows.get(cid, 0) + rows.num_rows
            if cid not in tiers and cid not in self.new:
                self.new.append(cid)

    def next_chunk(self) -> int | None:
        """The chunk to COPY into next: the one with the most rows queued (the stream's
        current chunk; late rows' chunks wait, so they do not break its COPY up)."""
        waiting = {c: sum(len(p) for p in q) for c, q in self.queued.items() if q}
        return max(waiting, key=waiting.__getitem__) if waiting else None

    def session(self, chunk: int, tiers: dict[int, str]) -> Iterator[bytes]:
        """The rows for one COPY into ``chunk``: those queued, then those of each block
        that arrives meanwhile, for as long as each brings rows for ``chunk`` and no
        chunk of unknown tier (which must be looked up, or created, on the data
        connection first, between two COPYs)."""
        q = self.queued[chunk]
        while True:
            while q:
                yield q.popleft()
            if self.done or self.new:
                return
            self.pull(tiers)
            if not q:
                return


def write_streamed(job: PartitionJob, part: int, batches: Iterator[pa.RecordBatch],
                   received: list[pa.RecordBatch]) -> tuple[int, int, bool, list[int]] | None:
    """Archive partition ``part`` from ``batches`` as they come, appending each to
    ``received``; the result as :func:`archive.exec_sink.write_partition` gives it, or
    None when it gave up (nothing written, ``batches`` drained into ``received``): the
    caller then writes ``received`` the whole-partition way.

    A chunk's rows go in one COPY that stays open while the next blocks arrive
    (:func:`archive.copy.copy_binary_stream`): the server inserts a block while the
    worker receives and encodes the next, and sets up one COPY per chunk rather than
    one per Arrow batch. A COPY ends when a block brings no rows for its chunk (the
    stream moved on; the next COPY takes the chunk with most rows waiting) or reaches
    a chunk whose tier is not known yet; rows of the other chunks wait, encoded, in
    memory, and all are sent before the commit."""
    from archive.pg import is_connection_lost

    spec = job.spec
    tiers: dict[int, str] = {}
    columns = [c for c, _ in spec.stored_columns]
    feed = _Arriving(job, batches, received)
    opened = False
    try:
        conn = worker_connection(job.dsn, job.schema)  # unreachable: the whole way retries, as below
        with conn.cursor() as cur:
            while True:
                if feed.new:
                    if not _reach(cur, job, tiers, feed.new):
                        return _give_up(conn, batches, received)
                    feed.new = []
                chunk = feed.next_chunk()
                if chunk is None:
                    if feed.done:
                        break
                    feed.pull(tiers)
                    continue
                if not opened:
                    if not _open_part(cur, job, part):  # written before (a replay, a retried task)
                        conn.rollback()
                        received.extend(batches)
                        return 0, 0, True, []
                    opened = True
                copy_binary_stream(cur, partition_name(spec.name, chunk), columns, feed.session(chunk, tiers))
            if not opened:  # no row to write (empty, or all dead letters): the whole way records it
                return _give_up(conn, batches, received)
            # late: its chunk had left the present tier when this partition first reached it (M 4.1)
            counts = {c: [n, n if tiers[c] != "present" else 0] for c, n in feed.rows.items()}
            _close_part(cur, job, part, sum(feed.rows.values()), feed.dead, counts, feed.max_us)
        conn.commit()
    except BaseException as exc:
        drop_worker_connection(job.dsn, job.schema)
        if isinstance(exc, Exception) and is_connection_lost(exc):  # the whole way retries it
            received.extend(batches)
            return None
        raise
    return sum(feed.rows.values()), len(feed.dead), False, []


def _reach(cur, job: PartitionJob, tiers: dict[int, str], new: list[int]) -> bool:
    """Add the tiers of chunks ``new`` to ``tiers``, creating the missing ones beside the
    open data transaction (:func:`create_beside`); False when the partition must give
    up: more chunks than one transaction may lock, or a chunk not created in time."""
    if len(tiers) + len(new) > chunk_sql.MAX_CHUNKS_PER_BATCH:
        return False
    tiers.update(catalog_tiers(cur, job.spec.name, new))
    missing = [c for c in new if c not in tiers]
    if missing and create_beside(job, missing):
        tiers.update(catalog_tiers(cur, job.spec.name, missing))  # read committed: sees them now
    return all(c in tiers for c in new)


def _open_part(cur, job: PartitionJob, part: int) -> bool:
    """Insert the partition's ``moirae_batch_parts`` row before its first row; False when
    the partition was written before (nothing is to be written)."""
    cur.execute("INSERT INTO moirae_batch_parts (stream, batch_id, part, rows, dead_letters, chunks) "
                "VALUES (%s, %s, %s, 0, 0, '{}') ON CONFLICT DO NOTHING RETURNING part",
                (job.spec.name, job.batch_id, part))
    return cur.fetchone() is not None


def _close_part(cur, job: PartitionJob, part: int, rows: int, dead_letters: list, counts: dict[int, list[int]],
                max_us: int | None) -> None:
    """Record the partition's counts in its ``moirae_batch_parts`` row, and its dead letters."""
    cur.execute("UPDATE moirae_batch_parts SET rows = %s, dead_letters = %s, chunks = %s, max_us = %s "
                "WHERE stream = %s AND batch_id = %s AND part = %s AND piece = 0",
                (rows, len(dead_letters), json.dumps({str(c): v for c, v in sorted(counts.items())}),
                 max_us, job.spec.name, job.batch_id, part))
    if dead_letters:
        insert_dead_letters(cur, job.spec.name, job.batch_id, dead_letters)


#: how long creating chunks beside an open data transaction waits for a lock (ms)
CREATE_LOCK_TIMEOUT_MS = 2000


def create_beside(job: PartitionJob, chunk_ids: list[int]) -> bool:
    """Create ``chunk_ids`` on a connection of their own and commit them, while the
    partition's data transaction stays open and goes on writing; False when a lock was
    not granted within :data:`CREATE_LOCK_TIMEOUT_MS` (the caller then gives up).

    A chunk is attached to the stream's table (:func:`archive.chunks.partition_ddl`),
    which does not wait for the data transactions writing its other chunks, this one
    included. It waits for a transaction holding the stream's table in a stronger mode:
    the stream's index DDL (:func:`archive.contributors.ensure_time_index`) or a
    retention drop, each of which may in turn be waiting for this partition's data
    transaction. PostgreSQL cannot see that cycle, which runs through this process, so
    the wait is bounded and the partition then goes the whole-partition way, which
    creates its chunks with no transaction open."""
    from psycopg2 import errors

    conn = connect(job.dsn, job.schema, lock_timeout_ms=CREATE_LOCK_TIMEOUT_MS)
    try:
        create_missing(conn, job, chunk_ids)
        return True
    except errors.LockNotAvailable:
        conn.rollback()
        return False
    finally:
        conn.close()


def _give_up(conn, batches: Iterator[pa.RecordBatch], received: list[pa.RecordBatch]) -> None:
    conn.rollback()
    received.extend(batches)
    return None


def write_arriving(job: PartitionJob, part: int, batches: Iterator[pa.RecordBatch]
                   ) -> tuple[tuple[int, int, bool, list[int]], list[pa.RecordBatch]]:
    """Archive partition ``part`` from its Arrow batches as the JVM hands them over:
    as they arrive when the job allows it (:func:`write_streamed`), else, or when
    that gives up, once the last has come (:func:`archive.exec_sink.write_with_retry`). Returns the
    result (rows, dead letters, duplicate, missing chunks) and every batch received."""
    received: list[pa.RecordBatch] = []
    result = None
    if streamable(job):
        result = write_streamed(job, part, batches, received)  # None: gave up, every batch in received
    else:
        received = list(batches)
    if result is None:
        result = (0, 0, False, [])
        if sum(b.num_rows for b in received):
            result = write_with_retry(job, part, pa.Table.from_batches(received))
    return result, received
