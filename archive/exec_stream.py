"""A partition's rows COPYed as they arrive from the JVM (issue 11 §2), not after the last.

:func:`archive.exec_sink.write_partition` starts writing once the whole partition has
reached the Python worker: the JVM produces the rows, then PostgreSQL inserts them,
one after the other. At the archive configuration's highest sustained rate on this
2-core machine (bench/engine_jvm.py) half the machine was idle while a micro-batch took
its whole trigger interval. Here each Arrow batch the JVM hands over (at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows) is split by chunk and COPYed into
its chunks' partitions while the JVM produces the next, in the one data transaction of
the partition.

Exactly-once is kept as in :mod:`archive.exec_sink`: the partition's
``moirae_batch_parts`` row is inserted before its first row (a partition written before
is found at once and nothing is written), and updated with the counts before the
commit. A batch reaching a chunk not in the catalog has it created on a connection of
its own, committed at once, while the data transaction stays open
(:func:`create_beside`): attaching a partition does not wait for the transactions
writing the stream's other chunks. Until 2026-11-27 the streamed path gave up there
and the whole partition was written again the other way, so PostgreSQL wrote its
first rows twice: one batch in 30 at the shortest chunk interval and a 2-second
trigger, and every partition of a backfill whose batches span several chunks. The
sink of bench/archive_ingest.py (2M rows of CSV, 8 micro-batches each reaching new
chunks) took 5.57, 5.67 and 5.17 s that way and 4.80, 4.50 and 4.50 s this way (warm
runs, one probe, 2026-11-27).

Rows to be clustered by keys (:func:`archive.contributors.cluster_by`) are sorted and
COPYed a block of at least :data:`CLUSTER_BLOCK_ROWS` rows at a time (:func:`blocks`),
not after the whole partition: a partition of up to that many rows is still one sorted
run, and a larger one is a few runs, each as long as a BRIN range needs.

The streamed path still gives up before the first write or rolls back when a batch
reaches more chunks than one transaction may lock, when a chunk's creation waits for a
lock too long (:data:`CREATE_LOCK_TIMEOUT_MS`), for rows without a chunk interval
(staged), and when its connection broke: the whole partition then goes the way it
always went (with its retries).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from archive.copy import arrow_to_copy_binary, copy_binary
from archive.exec_sink import (
    PartitionJob,
    _connection,
    _drop_connection,
    _tiers,
    by_chunk,
    connect,
    create_missing,
    sort_by,
    split_arrow,
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
reads one or two ranges of each block. Until 2026-11-27 the whole partition was sorted
and COPYed once it had all arrived: in bench/engine_jvm.py's provenance configuration
at 640,000 rows/s (a shared read: each partition of 640,000 rows COPYed inside the
event-query's stage), 60-s runs alternating the two gave 1.30, 1.09 and 1.22 s of
stage time a batch that way against 1.08, 1.06 and 1.14 s in blocks. The window reads
took 1.37 s in the one block run whose phases were printed, against 1.14 and 1.56 s in
two whole-partition runs."""


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


def write_streamed(job: PartitionJob, part: int, batches: Iterator[pa.RecordBatch],
                   received: list[pa.RecordBatch]) -> tuple[int, int, bool, list[int]] | None:
    """Archive partition ``part`` from ``batches`` as they come, appending each to
    ``received``; the result as :func:`archive.exec_sink.write_partition` gives it, or
    None when it gave up (nothing written, ``batches`` drained into ``received``): the
    caller then writes ``received`` the whole-partition way."""
    from archive.archiver import MAX_CHUNKS_PER_BATCH
    from archive.pg import is_connection_lost

    spec = job.spec
    types = spec.stored_columns
    columns = [c for c, _ in types]
    tiers: dict[int, str] = {}
    counts: dict[int, list[int]] = {}  # chunk -> [rows, late rows]
    dead_letters: list = []
    rows, max_us, opened = 0, None, False
    try:
        conn = _connection(job.dsn, job.schema)  # unreachable: the whole way retries, as below
        with conn.cursor() as cur:
            for block in blocks(job, batches, received, CLUSTER_BLOCK_ROWS):
                good, dead = split_arrow(block, spec)
                good = sort_by(good, job.cluster)  # as write_partition does: BRIN then skips other keys' rows
                dead_letters += dead
                if not good.num_rows:
                    continue
                us = np.asarray(good.column(spec.ts_col).cast(pa.int64()))
                max_us = max(int(us.max()), max_us if max_us is not None else int(us.max()))
                chunk_of = np.floor_divide(us, job.span_us)
                ids, n = np.unique(chunk_of, return_counts=True)
                ids = ids.tolist()
                new = [c for c in ids if c not in tiers]
                if new:
                    if len(tiers) + len(new) > MAX_CHUNKS_PER_BATCH:
                        return _give_up(conn, batches, received)
                    tiers.update(_tiers(cur, spec.name, new))
                    missing = [c for c in new if c not in tiers]
                    if missing and create_beside(job, missing):
                        tiers.update(_tiers(cur, spec.name, missing))  # read committed: sees them now
                    if any(c not in tiers for c in new):
                        return _give_up(conn, batches, received)
                if not opened:
                    cur.execute("INSERT INTO moirae_batch_parts (stream, batch_id, part, rows, dead_letters, chunks) "
                                "VALUES (%s, %s, %s, 0, 0, '{}') ON CONFLICT DO NOTHING RETURNING part",
                                (spec.name, job.batch_id, part))
                    if cur.fetchone() is None:  # written before (a replay, a retried task)
                        conn.rollback()
                        received.extend(batches)
                        return 0, 0, True, []
                    opened = True
                good = good.append_column("_batch", pa.array(np.full(good.num_rows, job.batch_id, dtype=np.int64)))
                for cid, sub in by_chunk(good, chunk_of, ids):
                    copy_binary(cur, partition_name(spec.name, cid), columns, arrow_to_copy_binary(sub, types))
                for cid, k in zip(ids, n.tolist(), strict=True):
                    c = counts.setdefault(cid, [0, 0])
                    c[0] += k
                    c[1] += k if tiers[cid] != "present" else 0  # late: its chunk left the present tier (M 4.1)
                rows += good.num_rows
            if not opened:  # no row to write (empty, or all dead letters): the whole way records it
                return _give_up(conn, batches, received)
            cur.execute("UPDATE moirae_batch_parts SET rows = %s, dead_letters = %s, chunks = %s, max_us = %s "
                        "WHERE stream = %s AND batch_id = %s AND part = %s",
                        (rows, len(dead_letters), json.dumps({str(c): v for c, v in sorted(counts.items())}),
                         max_us, spec.name, job.batch_id, part))
            if dead_letters:
                insert_dead_letters(cur, spec.name, job.batch_id, dead_letters)
        conn.commit()
    except BaseException as exc:
        _drop_connection(job.dsn, job.schema)
        if isinstance(exc, Exception) and is_connection_lost(exc):  # the whole way retries it
            received.extend(batches)
            return None
        raise
    return rows, len(dead_letters), False, []


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
