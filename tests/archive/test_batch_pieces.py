"""A batch touching more chunks than one transaction may lock is written in pieces, each
exactly once (archive.chunks.pieces; archive.writes on the driver, archive.exec_sink on
the executors): it archives whole, and a process killed between two pieces is replayed
with nothing lost and nothing written twice."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

from archive import chunks as chunks_mod
from archive import exec_sink
from archive.exec_sink import PartitionJob, write_partition
from tests.archive.arch_helpers import catalog_rows, partition_counts, partition_table, rows, table_rows

pytestmark = pytest.mark.postgres


def _writing_transactions(arch) -> int:
    """How many transactions wrote the stream's rows (a row's xmin is its writer)."""
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(DISTINCT xmin::text) FROM metrics")
        return int(cur.fetchone()[0])


def _parts_left(arch) -> int:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM moirae_batch_parts")
        return int(cur.fetchone()[0])


def test_a_batch_over_the_lock_budget_archives_whole_in_bounded_pieces(archiver, monkeypatch):
    """The issue's shape: a fast replay's first batch spans more hourly chunks than
    one transaction may lock (the limit lowered from 512 to 64: creating a thousand
    partitions alone takes half a minute here)."""
    monkeypatch.setattr(chunks_mod, "MAX_CHUNKS_PER_BATCH", 64)
    n = 2 * 64 + 20  # three pieces
    res = archiver.append("metrics", 1, rows(n, step=timedelta(hours=1)))
    assert (res.rows, len(res.chunks), res.duplicate) == (n, n, False)
    assert len(table_rows(archiver)) == n and sum(catalog_rows(archiver).values()) == n
    assert _writing_transactions(archiver) == 3 and _parts_left(archiver) == 0
    assert archiver.batch_ids("metrics") == [1]
    assert archiver.append("metrics", 1, rows(n, step=timedelta(hours=1))).duplicate
    assert len(table_rows(archiver)) == n


def test_an_executor_partition_over_the_limit_writes_pieces_then_commits(archiver, monkeypatch):
    monkeypatch.setattr(chunks_mod, "MAX_CHUNKS_PER_BATCH", 8)
    job = PartitionJob(archiver.db.dsn, archiver.db.schema, archiver.stream("metrics"), 1,
                       archiver.fix_interval("metrics", 0, timedelta(0)).span_us)
    try:
        table = partition_table(archiver, rows(30, step=timedelta(hours=1)))
        assert write_partition(job, 0, table) == (30, 0, False, [])
        assert write_partition(job, 0, table) == (0, 0, True, [])  # a retried task: every piece is there
    finally:
        exec_sink.drop_worker_connection(archiver.db.dsn, archiver.db.schema)
    res = archiver.commit_parts("metrics", 1)
    assert res.rows == 30 and _writing_transactions(archiver) == 4
    assert catalog_rows(archiver) == partition_counts(archiver) and sum(catalog_rows(archiver).values()) == 30


@pytest.mark.parametrize("path", ["driver", "executor"])
def test_a_kill_between_pieces_then_a_replay_loses_and_duplicates_nothing(archiver, path, monkeypatch):
    n, most, kill_after = 40, 8, 2  # five pieces; killed after the second committed
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.run([sys.executable, "-m", "tests.archive.piece_child", archiver.db.dsn, archiver.db.schema,
                            path, str(n), str(most), str(kill_after)], env=env, capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    written = table_rows(archiver)["n"].tolist()
    assert written == list(range(2 * most)), "the two committed pieces, and only those"
    assert archiver.batch_ids("metrics") == []  # the batch is not logged: it will be replayed
    monkeypatch.setattr(chunks_mod, "MAX_CHUNKS_PER_BATCH", most)
    frame = rows(n, step=timedelta(hours=1))
    if path == "driver":
        res = archiver.append("metrics", 7, frame)
    else:
        job = PartitionJob(archiver.db.dsn, archiver.db.schema, archiver.stream("metrics"), 7,
                           archiver.grid_of("metrics").span_us)
        try:
            assert write_partition(job, 0, partition_table(archiver, frame))[:3] == (n - 2 * most, 0, False)
        finally:
            exec_sink.drop_worker_connection(archiver.db.dsn, archiver.db.schema)
        res = archiver.commit_parts("metrics", 7)
    assert res.rows == n and not res.duplicate
    assert table_rows(archiver)["n"].tolist() == list(range(n))  # each row once
    assert catalog_rows(archiver) == partition_counts(archiver) and sum(catalog_rows(archiver).values()) == n
    assert archiver.batch_ids("metrics") == [7] and _parts_left(archiver) == 0
