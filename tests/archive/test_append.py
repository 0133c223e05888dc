"""Exactly-once appends from pandas / Arrow (DESIGN.md §4 flow 1, §6 "Nothing is lost")."""

from __future__ import annotations

import threading
from datetime import timedelta

import pyarrow as pa
import pytest
from arch_helpers import T0, catalog_rows, fresh_archiver, partition_counts, rows, table_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.postgres


def test_same_batch_twice_leaves_one_copy(archiver):
    batch = rows(40)
    first = archiver.append("metrics", 7, batch)
    again = archiver.append("metrics", 7, batch)
    assert (first.rows, first.duplicate) == (40, False)
    assert (again.rows, again.duplicate, again.chunks) == (0, True, ())
    got = table_rows(archiver)
    assert len(got) == 40
    assert got["n"].tolist() == list(range(40))
    assert got["_sid"].is_unique
    assert archiver.batch_ids("metrics") == [7]
    assert sum(catalog_rows(archiver).values()) == 40


def test_replay_with_different_content_is_still_a_no_op(archiver):
    """The batch id, not the content, decides: Spark replays the same id after a crash."""
    archiver.append("metrics", 0, rows(5))
    assert archiver.append("metrics", 0, rows(9, first=100)).duplicate
    assert table_rows(archiver)["n"].tolist() == list(range(5))


def test_arrow_and_pandas_batches_land_the_same(archiver):
    frame = rows(12)
    archiver.append("metrics", 0, frame)
    archiver.append("metrics", 1, pa.Table.from_pandas(rows(12, first=12, start=T0 + timedelta(days=1))))
    got = table_rows(archiver)
    assert got["n"].tolist() == list(range(24))
    assert got.groupby("_batch").size().to_dict() == {0: 12, 1: 12}


def test_catalog_counts_match_partitions(archiver):
    archiver.append("metrics", 0, rows(50))
    archiver.append("metrics", 1, rows(30, first=50, start=T0 + timedelta(minutes=3)))
    assert catalog_rows(archiver) == partition_counts(archiver)


@pytest.mark.slow
def test_concurrent_appends_creating_the_same_chunk_keep_every_row(archiver):
    """Several writers (foreachBatch callbacks of several queries) racing to create the
    same new chunks: no row lost, the catalog's count stays exact."""
    for rnd in range(3):
        start = T0 + timedelta(days=10 * (rnd + 1))
        barrier = threading.Barrier(4)
        errors = []

        def write(k, start=start, barrier=barrier, rnd=rnd, errors=errors):
            try:
                barrier.wait()
                archiver.append("metrics", 100 * rnd + k, rows(200, start=start, step=timedelta(seconds=30),
                                                              first=10_000 * rnd + 1000 * k))
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
    assert len(table_rows(archiver)) == 3 * 4 * 200
    assert catalog_rows(archiver) == partition_counts(archiver)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_replay_order_archives_each_row_once(pg_dsn, data):
    """Batches delivered with arbitrary replays (as after crashes) archive each row once."""
    n_batches = data.draw(st.integers(1, 5), label="batches")
    sizes = data.draw(st.lists(st.integers(0, 30), min_size=n_batches, max_size=n_batches), label="sizes")
    batches, first = [], 0
    for size in sizes:
        batches.append(rows(size, start=T0 + timedelta(minutes=13 * first), first=first))
        first += size
    order = data.draw(st.lists(st.integers(0, n_batches - 1), max_size=12), label="replays")
    with fresh_archiver(pg_dsn) as arch:
        for b in [*range(n_batches), *order]:
            arch.append("metrics", b, batches[b])
        got = table_rows(arch)
        assert got["n"].tolist() == list(range(first))
        assert catalog_rows(arch) == partition_counts(arch)
