"""A partition COPYed as its Arrow batches arrive (archive/exec_stream.py), without Spark:
the writer is called in this process, as a Python worker calls it.

Against the whole-partition writer on the same rows: the same archive and the same
partition record (counts per chunk, late rows, newest time, dead letters), however the
rows are cut into batches. A replayed partition writes nothing. A batch that reaches a
chunk not in the catalog has it created beside the open transaction. A creation that
waits too long for a lock, or a connection that breaks midway, leaves nothing written
and every batch in hand for the whole-partition writer, which then archives each row
once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive import exec_sink, exec_stream
from archive.contributors import ensure_time_index
from archive.errors import DatabaseUnavailable
from archive.exec_sink import PartitionJob, write_partition, write_with_retry
from archive.exec_stream import streamable, write_arriving, write_streamed
from tests.archive.arch_helpers import (
    T0,
    blocking_others,
    catalog_rows,
    fresh_archiver,
    partition_counts,
    partition_table,
    rows,
    table_rows,
    wait_until,
)

pytestmark = pytest.mark.postgres
HOUR_US = 3_600_000_000


def _job(arch, batch_id: int = 1, **kw) -> PartitionJob:
    arch.fix_interval("metrics", 0, timedelta(0))
    return PartitionJob(arch.db.dsn, arch.db.schema, arch.stream("metrics"), batch_id, HOUR_US, **kw)


def _cut(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    """``table`` as record batches ending at each of ``cuts`` (and at its end)."""
    edges = sorted({min(c, table.num_rows) for c in cuts} | {0, table.num_rows})
    return [b for lo, hi in zip(edges, edges[1:], strict=False) for b in table.slice(lo, hi - lo).to_batches()]


def _record(arch, batch_id: int = 1) -> list[tuple]:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT part, rows, dead_letters, chunks, max_us FROM moirae_batch_parts "
                    "WHERE stream = 'metrics' AND batch_id = %s ORDER BY part", (batch_id,))
        return cur.fetchall()


def _dead(arch) -> list[tuple]:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT batch_id, row_data, reason FROM moirae_dead_letters ORDER BY id")
        return cur.fetchall()


def _frame(n: int, late_hours: int, bad: int) -> pd.DataFrame:
    """``n`` rows over a few hours, the first ``bad`` with a NUL in their text (dead letters)."""
    frame = rows(n, step=timedelta(minutes=17))
    if late_hours:  # some rows an hour back, into a chunk made old below
        frame.loc[frame.index[::5], "ts"] = frame["ts"][::5] - timedelta(hours=late_hours)
    frame.loc[frame.index[:bad], "host"] = "bad\x00host"
    return frame


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 60), cuts=st.lists(st.integers(0, 60), max_size=6), late=st.sampled_from([0, 1]),
       bad=st.integers(0, 2), cluster=st.sampled_from([(), ("host",)]), block=st.integers(1, 30))
def test_streamed_writes_what_the_whole_partition_writer_writes(pg_dsn, n, cuts, late, bad, cluster, block):
    frame = _frame(n, late, min(bad, n))
    got = {}
    kept = exec_stream.CLUSTER_BLOCK_ROWS
    exec_stream.CLUSTER_BLOCK_ROWS = block  # (hypothesis runs the examples in one fixture scope)
    try:
        _both_ways(pg_dsn, frame, cuts, cluster, got)
    finally:
        exec_stream.CLUSTER_BLOCK_ROWS = kept
    assert got["streamed"] == got["whole"]


def _both_ways(pg_dsn, frame, cuts, cluster, got) -> None:
    for way in ("whole", "streamed"):
        with fresh_archiver(pg_dsn) as arch:
            arch.ensure_chunks("metrics", list(range(473_350, 473_372)))  # every chunk the rows reach
            with arch.db.connection() as conn, conn.cursor() as cur:  # the oldest chunk has left the present tier
                cur.execute("UPDATE moirae_chunks SET tier = 'old' WHERE chunk_id = 473351")
            job = _job(arch, cluster=cluster)
            table = partition_table(arch, frame)
            if way == "whole":
                res = write_partition(job, 3, table)
            else:
                assert streamable(job)
                res, received = write_arriving(job, 3, iter(_cut(table, cuts)))  # as a Python worker does
                assert pa.Table.from_batches(received, schema=table.schema).equals(table)
            got[way] = (res, table_rows(arch).to_dict("list"), _record(arch), [d[1:] for d in _dead(arch)])
            exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_replayed_partition_writes_nothing_and_hands_every_batch_back(archiver):
    job = _job(archiver)
    table = partition_table(archiver, rows(12))
    archiver.ensure_chunks("metrics", [473_352, 473_353])
    assert write_streamed(job, 0, iter(_cut(table, [4, 8])), []) == (12, 0, False, [])
    received = []
    assert write_streamed(job, 0, iter(_cut(table, [4, 8])), received) == (0, 0, True, [])
    assert sum(b.num_rows for b in received) == 12 and len(table_rows(archiver)) == 12
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_chunk_missing_midway_is_created_beside_the_open_transaction(archiver):
    """The first batch's chunk exists and is written; the second reaches one that does
    not: it is created and committed on a connection of its own while the data
    transaction stays open, and every row is archived once, in one pass."""
    job = _job(archiver)
    table = partition_table(archiver, rows(12, step=timedelta(minutes=10)))  # 2 hours: chunks 473352, 473353
    archiver.ensure_chunks("metrics", [473_352])
    received = []
    assert write_streamed(job, 0, iter(_cut(table, [6])), received) == (12, 0, False, [])
    assert pa.Table.from_batches(received).equals(table)
    archiver.commit_parts("metrics", 1)
    assert table_rows(archiver)["n"].tolist() == list(range(12))
    assert catalog_rows(archiver) == partition_counts(archiver) == {473_352: 6, 473_353: 6}
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_creation_caught_behind_index_ddl_gives_up_and_the_whole_writer_archives_each_row_once(
        archiver, monkeypatch):
    """A cycle PostgreSQL cannot see: the stream's index DDL holds the stream's table and
    waits to index the chunk this partition's open transaction writes, and creating the
    next chunk waits for the DDL. The creation's wait is bounded: the partition gives up
    and rolls back, the DDL finishes, and the whole-partition writer archives each row
    once."""
    monkeypatch.setattr(exec_stream, "CREATE_LOCK_TIMEOUT_MS", 300)
    created = []
    real = exec_stream.create_beside
    monkeypatch.setattr(exec_stream, "create_beside", lambda job_, ids: created.append(real(job_, ids)) or created[-1])
    job = _job(archiver)
    table = partition_table(archiver, rows(12, step=timedelta(minutes=10)))  # chunks 473352, 473353
    archiver.ensure_chunks("metrics", [473_352])
    ddl: dict = {}

    def batches():
        pieces = _cut(table, [6])
        yield pieces[0]  # written into chunk 473352: the data transaction holds it now
        writer = exec_sink.worker_connection(job.dsn, job.schema).get_backend_pid()
        t = threading.Thread(target=lambda: ddl.update(keys=ensure_time_index(archiver, "metrics", ["host"])))
        t.start()
        ddl["thread"] = t
        wait_until(lambda: blocking_others(archiver, writer), "the index DDL waits for the open writer")
        yield from pieces[1:]

    received = []
    t0 = time.monotonic()
    assert write_streamed(job, 0, batches(), received) is None
    assert time.monotonic() - t0 < 15 and created == [False]  # the creation's wait ran out
    ddl["thread"].join(30)
    assert not ddl["thread"].is_alive() and ddl["keys"] == ("host",)
    assert pa.Table.from_batches(received).equals(table) and len(table_rows(archiver)) == 0
    assert write_with_retry(job, 0, pa.Table.from_batches(received)) == (12, 0, False, [])
    archiver.commit_parts("metrics", 1)
    assert table_rows(archiver)["n"].tolist() == list(range(12))
    assert catalog_rows(archiver) == partition_counts(archiver) == {473_352: 6, 473_353: 6}
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_connection_lost_midway_leaves_nothing_and_the_retry_archives_each_row_once(archiver):
    job = _job(archiver)
    table = partition_table(archiver, rows(12, start=T0, step=timedelta(minutes=4)))
    archiver.ensure_chunks("metrics", [473_352])

    def batches():
        pieces = _cut(table, [5])
        yield pieces[0]
        backend = exec_sink.worker_connection(job.dsn, job.schema).get_backend_pid()  # the writer's, mid-COPY
        with archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (backend,))
        yield from pieces[1:]

    received = []
    assert write_streamed(job, 0, batches(), received) is None
    assert pa.Table.from_batches(received).equals(table) and len(table_rows(archiver)) == 0
    assert write_with_retry(job, 0, pa.Table.from_batches(received)) == (12, 0, False, [])
    archiver.commit_parts("metrics", 1)
    assert table_rows(archiver)["n"].tolist() == list(range(12))
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_clustered_partition_is_written_as_it_arrives_in_sorted_blocks(archiver, monkeypatch):
    """Rows to be clustered are sorted by the keys a block at a time (at least
    CLUSTER_BLOCK_ROWS rows, whole arriving batches) and each block COPYed as it is
    complete: in the chunk, each block's rows by key (stable), the blocks in arrival order."""
    monkeypatch.setattr(exec_stream, "CLUSTER_BLOCK_ROWS", 10)
    job = _job(archiver, cluster=("host",))
    assert streamable(job)
    frame = rows(30, step=timedelta(minutes=1))  # all in chunk 473352; hosts h0, h1, h2 in turn
    archiver.ensure_chunks("metrics", [473_352])
    assert write_streamed(job, 0, iter(_cut(partition_table(archiver, frame), [4, 8, 12, 16, 20, 24, 28])),
                          []) == (30, 0, False, [])
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT n FROM metrics__c473352 ORDER BY ctid")
        physical = [r[0] for r in cur.fetchall()]
    blocks = [frame[lo:hi] for lo, hi in ((0, 12), (12, 24), (24, 30))]  # batches of 4 until >= 10 rows
    assert physical == [n for b in blocks for n in b.sort_values("host", kind="stable")["n"]]
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_staged_and_skipped_jobs_keep_the_whole_partition_way(archiver):
    assert streamable(_job(archiver))
    assert streamable(_job(archiver, cluster=("host",)))  # sorted a block at a time
    assert not streamable(_job(archiver, skip=True))
    assert not streamable(PartitionJob(archiver.db.dsn, archiver.db.schema, archiver.stream("metrics"), 1, 0))


def test_a_server_unreachable_at_the_start_is_retried_the_whole_way(archiver):
    """No connection at all: the streamed writer gives up, and the whole-partition
    writer retries for its budget and then names the partition (a raw connection error
    from the streamed writer would have failed the task at once)."""
    dead = "host=127.0.0.1 port=1 dbname=postgres user=postgres connect_timeout=1"
    job = PartitionJob(dead, archiver.db.schema, archiver.stream("metrics"), 5, HOUR_US, retry_seconds=0.5)
    with pytest.raises(DatabaseUnavailable, match="batch 5 part 2 of stream 'metrics'"):
        write_arriving(job, 2, iter(_cut(partition_table(archiver, rows(3)), [1])))
