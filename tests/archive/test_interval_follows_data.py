"""Chunk intervals follow the data (archive.chunks.settle): a year of an hourly stream
and of a sparse stream, appended as a fast replay delivers them (a first batch of one
instant, then about 40 days, then bigger), ends in a handful of chunks on one LADDER
step, every row present once; an estimate far from the data is revised while the stream
is young, its chunks staying disjoint and on the ladder's grid."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from archive import StreamSpec
from archive.abc import EPOCH
from archive.chunks import LADDER
from tests.archive.arch_helpers import T0, make_archiver

pytestmark = pytest.mark.postgres
YEAR = timedelta(days=365)


def _hourly(keys: int = 3) -> pd.DataFrame:
    """One row per key per hour for a year (every key at the same instant)."""
    hours = pd.date_range(T0, T0 + YEAR, freq="1h", inclusive="left")
    ts = np.repeat(hours.to_numpy(), keys)
    return pd.DataFrame({"ts": pd.to_datetime(ts, utc=True), "k": np.tile([f"k{i}" for i in range(keys)], len(hours)),
                         "v": np.arange(len(ts), dtype=float)})


def _sparse() -> pd.DataFrame:
    """Three rows an hour at uneven times, one per key."""
    rng = np.random.default_rng(7)
    frame = _hourly()
    frame["ts"] = frame["ts"] + pd.to_timedelta(rng.integers(0, 3_600, len(frame)), unit="s")
    return frame.sort_values("ts", kind="stable", ignore_index=True)


def _replay(arch, stream: str, frame: pd.DataFrame) -> None:
    """Append ``frame`` as a fast replay's micro-batches: the first instant alone, then
    40 days, then 60 days at a time."""
    first = frame["ts"].iloc[0]
    cuts = [first, first + pd.Timedelta(seconds=1), first + pd.Timedelta(days=40)]
    while cuts[-1] <= frame["ts"].iloc[-1]:
        cuts.append(cuts[-1] + pd.Timedelta(days=60))
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:], strict=False)):
        part = frame[(frame["ts"] >= lo) & (frame["ts"] < hi)]
        if len(part):
            arch.append(stream, i, part.reset_index(drop=True))


def _check_layout(arch, stream: str, expected_rows: int) -> list:
    """Every chunk one interval long, on the interval's grid from the epoch, one LADDER
    step; chunks disjoint; catalog counts equal the rows in each chunk; all rows there."""
    chunks = sorted(arch.chunks(stream), key=lambda c: c.start)
    span = arch.grid_of(stream).span
    assert span in LADDER
    for c in chunks:
        assert c.end - c.start == span and (c.start - EPOCH) % span == timedelta(0)
    assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:], strict=False))
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {stream}")  # a whole-stream SELECT: a few locks only
        assert cur.fetchone()[0] == expected_rows
        cur.execute(f"SELECT tableoid::regclass::text, count(*) FROM {stream} GROUP BY 1")
        per_table = dict(cur.fetchall())
    assert {f"{stream}__c{c.chunk_id}": c.rows for c in chunks if c.rows} == per_table
    return chunks


@pytest.mark.parametrize("make", [_hourly, _sparse], ids=["hourly", "sparse"])
def test_a_year_replayed_fast_ends_in_a_few_chunks_with_every_row(pg, make):
    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        frame = make()
        _replay(arch, "s", frame)
        chunks = _check_layout(arch, "s", len(frame))
        assert len(chunks) <= 20, f"{len(chunks)} chunks of {arch.grid_of('s').span}"
        assert arch.grid_of("s").span == LADDER[-1]  # 3 rows an hour: the ladder's ceiling
        assert arch.catalog.provisional("s") is None  # the estimate is final: it covered a whole chunk
        assert sorted(arch.chunk_ids(["s"])) == [c.chunk_id for c in chunks]  # history tasks: the same grid
        q = arch.prepare("SELECT count(*) AS n FROM s")  # a history-query over the whole archive, task by task
        assert sum(int(arch.run_history_query(q, {}, t)["n"].sum()) for t in arch.chunk_ids(["s"])) == len(frame)
        again = make_archiver(pg, chunk_target_rows=500_000)  # another process sees the final interval
        assert again.grid_of("s").span == LADDER[-1] and again.catalog.provisional("s") is None
        again.close()
    finally:
        arch.close()


def test_an_estimate_far_from_the_data_is_revised_while_the_stream_is_young(pg):
    """A burst (1,000 rows at each of two instants a minute apart) first estimates a
    dense stream; the rows after it are one an hour, so the estimate is revised: the
    stream's rows move onto a coarser step, whole and once."""
    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        burst = pd.DataFrame({"ts": [T0] * 1000 + [T0 + timedelta(minutes=1)] * 1000,
                              "k": [f"k{i}" for i in range(2000)], "v": np.arange(2000.0)})
        arch.append("s", 0, burst)
        first = arch.grid_of("s").span
        assert first < timedelta(days=1) and arch.catalog.provisional("s") == "estimate"
        shown = arch.status()["streams"]["s"]
        assert shown["chunk_interval_provisional"] == "estimate" and not shown["chunk_interval_fixed"]
        later = pd.DataFrame({"ts": [T0 + timedelta(hours=h) for h in range(1, 24 * 20)], "k": "x",
                              "v": np.arange(1.0, 24 * 20)})
        total = len(burst)
        for i, day in enumerate(range(0, 24 * 20, 24 * 5)):
            part = later.iloc[day:day + 24 * 5].reset_index(drop=True)
            arch.append("s", 1 + i, part)
            total += len(part)
        assert arch.grid_of("s").span > first * 4  # revised to a coarser step
        _check_layout(arch, "s", total)
        with arch.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(DISTINCT v), count(*) FROM s WHERE k <> 'x'")
            assert cur.fetchone() == (2000, 2000)
    finally:
        arch.close()


def test_a_stream_no_longer_young_keeps_its_interval(pg, monkeypatch):
    """Past YOUNG_CHUNKS chunks an interval is final: the rows are never moved again."""
    from archive import chunks as chunks_mod

    monkeypatch.setattr(chunks_mod, "YOUNG_CHUNKS", 3)
    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        arch.append("s", 0, pd.DataFrame({"ts": [T0], "k": ["a"], "v": [0.0]}))  # one instant: a guess
        assert arch.catalog.provisional("s") == "guess" and arch.grid_of("s").span == timedelta(hours=1)
        arch.ensure_chunks("s", range(arch.grid_of("s").chunk_of(T0), arch.grid_of("s").chunk_of(T0) + 5))
        arch.append("s", 1, pd.DataFrame({"ts": [T0 + timedelta(hours=h) for h in range(1, 6)], "k": "a",
                                          "v": np.arange(1.0, 6)}))
        assert arch.grid_of("s").span == timedelta(hours=1) and arch.catalog.provisional("s") is None
        _check_layout(arch, "s", 6)
    finally:
        arch.close()


@pytest.mark.spark
def test_the_archive_query_revises_a_guess_before_its_executors_write(spark, pg):
    """Through the archive query's foreachBatch (archive.spark_sink.archive_batches, the
    executors writing): a first batch of one instant, then 40 days of a sparse stream,
    then 60 days at a time. Before: the guess (1 hour) was fixed by the first batch and
    the second spanned 960 hourly chunks."""
    from archive.spark_sink import archive_batches

    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        frame = _sparse()
        frame = frame[frame["ts"] < T0 + timedelta(days=160)]
        write = archive_batches(arch, "s")
        batches: list[pd.DataFrame] = []

        class Collect:
            def append(self, stream, i, part):
                batches.append(part)

        _replay(Collect(), "s", frame)
        for i, part in enumerate(batches):
            naive = part.assign(ts=part["ts"].dt.tz_convert("UTC").dt.tz_localize(None))
            write(spark.createDataFrame(naive[["ts", "k", "v"]]), i)
        assert [len(b) for b in batches][0] <= 3 and len(batches) >= 3
        chunks = _check_layout(arch, "s", len(frame))
        assert arch.grid_of("s").span == LADDER[-1] and len(chunks) <= 8
        assert arch.batch_ids("s") == list(range(len(batches)))
    finally:
        arch.close()


@pytest.mark.spark
def test_the_archive_query_writes_an_estimated_batch_in_one_spark_job(spark, pg):
    """While the interval is an estimate, each micro-batch through the archive query is
    one Spark job (the executors' writers): the estimate is revised from the rows
    archived so far, not from a second pass over the batch. A second job per batch
    (an aggregate of its rows) fails this; the rows all land, once, on one grid."""
    from archive.spark_sink import archive_batches

    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        frame = _sparse()
        days = [frame[(frame["ts"] >= T0 + timedelta(days=2 * i)) & (frame["ts"] < T0 + timedelta(days=2 * i + 2))]
                for i in range(4)]
        write = archive_batches(arch, "s")
        sc = spark.sparkContext
        jobs = []
        for i, part in enumerate(days):
            naive = part.assign(ts=part["ts"].dt.tz_convert("UTC").dt.tz_localize(None))
            df = spark.createDataFrame(naive[["ts", "k", "v"]])
            group = f"estimate-{i}-{id(write)}"
            sc.setJobGroup(group, "one archived batch")
            try:
                write(df, i)
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
            jobs.append(len(sc.statusTracker().getJobIdsForGroup(group)))
            if i == 0:  # two days at 3 rows an hour are far from a 500k-row chunk: an estimate
                assert arch.catalog.provisional("s") == "estimate"
        assert jobs[1:] == [1, 1, 1], jobs  # the first batch waited for a rate: its aggregate is the second job
        _check_layout(arch, "s", sum(len(d) for d in days))
        assert arch.batch_ids("s") == [0, 1, 2, 3]
    finally:
        arch.close()


@pytest.mark.spark
def test_an_estimate_is_checked_again_only_as_the_archived_rows_double(spark, pg):
    """Through the archive query: before each batch, a provisional estimate is checked
    against every archived row (a count of distinct instants over the whole stream)
    only once the stream's rows have doubled since its last check (RECHECK_GROWTH); in
    between the batch goes on the estimate's grid. Every row still lands once."""
    from archive.chunks import RECHECK_GROWTH
    from archive.spark_sink import archive_batches

    arch = make_archiver(pg, chunk_target_rows=500_000)
    try:
        arch.register_stream(StreamSpec.build("s", "ts", {"k": "text", "v": "double"}))
        frame = _sparse()
        days = [frame[(frame["ts"] >= T0 + timedelta(days=i)) & (frame["ts"] < T0 + timedelta(days=i + 1))]
                for i in range(12)]
        write = archive_batches(arch, "s")
        checked: list[int | None] = []
        for i, part in enumerate(days):
            naive = part.assign(ts=part["ts"].dt.tz_convert("UTC").dt.tz_localize(None))
            write(spark.createDataFrame(naive[["ts", "k", "v"]]), i)
            checked.append(arch.catalog.estimated_at.get("s"))
        assert arch.catalog.provisional("s") == "estimate"
        per_day = len(days[0])
        # the rows each check saw: the archive before batches 1, 2, 4, 8 (1, 2, 4, 8 days)
        seen = sorted({c for c in checked if c is not None})
        assert seen == [per_day * d for d in (1, 2, 4, 8)], (seen, per_day)
        assert all(b >= RECHECK_GROWTH * a for a, b in zip(seen, seen[1:], strict=False))
        _check_layout(arch, "s", sum(len(d) for d in days))
    finally:
        arch.close()
