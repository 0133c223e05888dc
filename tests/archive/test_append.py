"""Exactly-once appends from pandas / Arrow (DESIGN.md §4 flow 1, §6 "Nothing is lost")."""

from __future__ import annotations

import threading
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.archive.arch_helpers import T0, catalog_rows, fresh_archiver, partition_counts, rows, table_rows

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


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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


_KINDS = {"s": "text", "x": "double", "i": "bigint", "b": "boolean"}
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_kinds_row = st.tuples(_text | st.none(), st.floats() | st.none(), st.integers(-(2**63), 2**63 - 1) | st.none(),
                       st.booleans() | st.none())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_kinds_row, min_size=1, max_size=30))
def test_a_driver_append_stores_every_value_as_given(archiver, batch):
    """Archiver.append (the driver's path: events, contexts, history loads) COPYs in
    PostgreSQL's binary format (archive.copy.frame_to_copy_binary): text with quotes,
    tabs, newlines and backslashes comes back as it went in, '' apart from NULL, NaN and
    infinities apart from NULL, every bigint exactly, and NULL booleans as NULL."""
    from archive import StreamSpec

    archiver.register_stream(StreamSpec.build("kinds", "ts", _KINDS))
    bid = len(archiver.batch_ids("kinds"))
    start = T0 + timedelta(days=bid)
    cols = list(zip(*batch, strict=True))
    table = pa.table({"ts": pa.array([start + timedelta(seconds=j) for j in range(len(batch))],
                                     pa.timestamp("us", tz="UTC")),
                      "s": pa.array(cols[0], pa.string()), "x": pa.array(cols[1], pa.float64()),
                      "i": pa.array(cols[2], pa.int64()), "b": pa.array(cols[3], pa.bool_())})
    assert archiver.append("kinds", bid, table).rows == len(batch)
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute('SELECT s, x, i, b FROM "kinds" WHERE _batch = %s ORDER BY ts', (bid,))
        got = cur.fetchall()
    assert len(got) == len(batch)
    for want, have in zip(batch, got, strict=True):
        assert (have[0], have[2], have[3]) == (want[0], want[2], want[3])
        assert have[1] == want[1] or (want[1] != want[1] and have[1] != have[1])  # NaN stays NaN
