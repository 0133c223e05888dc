"""The streamed writer keeps one COPY open per chunk while a partition's Arrow batches
arrive (archive/exec_stream.py, archive/copy.py), without Spark: the writer is called
in this process, as a Python worker calls it.

While the next batch is on its way, the server is inside the chunk's COPY, not idle
between one COPY per batch; a partition's rows of one chunk are one COPY however many
batches carry them, and the rows of a chunk it reaches again later (late rows) wait,
encoded, for their own COPY, each row archived once. A source that fails midway aborts
the COPY (none of its rows is inserted, even outside a transaction) and its error is
raised."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from archive import exec_sink
from archive.copy import arrow_to_copy_rows, copy_binary_stream
from archive.exec_sink import PartitionJob
from archive.exec_stream import write_streamed
from archive.types import ColumnType
from tests.archive.arch_helpers import catalog_rows, partition_counts, partition_table, rows, table_rows

pytestmark = pytest.mark.postgres
HOUR_US = 3_600_000_000


def _job(arch, batch_id: int = 1) -> PartitionJob:
    arch.fix_interval("metrics", 0, timedelta(0))
    return PartitionJob(arch.db.dsn, arch.db.schema, arch.stream("metrics"), batch_id, HOUR_US)


def _writer_state(arch, pid: int) -> tuple[str, str]:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,))
        return cur.fetchone()


def test_the_chunks_copy_stays_open_while_the_next_batch_arrives(archiver):
    """Whenever the next batch is on its way the writer's backend is running a COPY:
    one for the chunk's batches until a batch brings none of its rows (here the third,
    all an hour back, late), one for that batch's chunk, then the first chunk's again;
    every row is archived once in its chunk."""
    job = _job(archiver)
    frame = rows(24, step=timedelta(minutes=2))  # 48 minutes: chunk 473352
    late = frame.index[8:12]  # one batch of rows an hour back: chunk 473351
    frame.loc[late, "ts"] = frame.loc[late, "ts"] - timedelta(hours=1)
    archiver.ensure_chunks("metrics", [473_351, 473_352])
    table = partition_table(archiver, frame)
    seen = []

    def batches():
        for lo in range(0, 24, 4):
            if lo:
                pid = exec_sink.worker_connection(job.dsn, job.schema).get_backend_pid()
                seen.append(_writer_state(archiver, pid))
            yield from table.slice(lo, 4).to_batches()

    assert write_streamed(job, 0, batches(), []) == (24, 0, False, [])
    archiver.commit_parts("metrics", 1)
    # inside a COPY at every batch: c473352's, then the late batch's own, then c473352's again
    assert [(state, query.split(" (")[0]) for state, query in seen] == [
        ("active", f'COPY "metrics__c{c}"') for c in (473_352, 473_352, 473_351, 473_352, 473_352)]
    assert sorted(table_rows(archiver)["n"].tolist()) == list(range(24))
    assert catalog_rows(archiver) == partition_counts(archiver) == {473_351: 4, 473_352: 20}
    exec_sink.drop_worker_connection(job.dsn, job.schema)


def test_a_source_failing_midway_ends_the_copy_and_its_error_is_raised(pg):
    cols = [("i", ColumnType.BIGINT), ("d", ColumnType.DOUBLE)]
    piece = arrow_to_copy_rows(pa.table({"i": np.arange(3), "d": np.ones(3)}), cols)

    def pieces():
        yield piece
        raise ValueError("the JVM's iterator broke")

    with pg.connection() as conn, conn.cursor() as cur:
        conn.autocommit = True  # a COPY that ended normally would have committed the first piece
        cur.execute("CREATE TABLE t (i bigint, d double precision)")
        with pytest.raises(ValueError, match="the JVM's iterator broke"):
            copy_binary_stream(cur, "t", ["i", "d"], pieces())
        copy_binary_stream(cur, "t", ["i", "d"], iter([piece, b"", piece]))  # the connection is usable again
        cur.execute("SELECT count(*), sum(i) FROM t")
        assert cur.fetchone() == (6, 6)
