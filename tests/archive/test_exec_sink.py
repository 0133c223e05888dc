"""Archiving from the executors (archive/exec_sink.py): the binary COPY encoder against
PostgreSQL, and exactly-once per (stream, batch id, partition id) when a micro-batch is
replayed after some of its partitions were written: by an executor failure in process,
and by a real SIGKILL of the Spark job between the COPY of one partition and the next."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive import Database
from archive.abc import Tier
from archive.copy import arrow_to_copy_binary, copy_binary
from archive.spark_sink import archive_batches
from archive.types import ColumnType
from tests.archive.arch_helpers import (
    T0,
    catalog_rows,
    fresh_archiver,
    make_archiver,
    metrics_spec,
    partition_counts,
    table_rows,
)

HERE = Path(__file__).resolve().parent
CSV_SCHEMA = "ts timestamp, host string, v double, n bigint"
COLS = [("i", ColumnType.BIGINT), ("t", ColumnType.TIMESTAMPTZ), ("s", ColumnType.TEXT),
        ("d", ColumnType.DOUBLE), ("b", ColumnType.BOOLEAN)]

_ts = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),  # noqa: DTZ001 - naive bounds
                   timezones=st.just(UTC))
_text = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=12)
_row = st.tuples(st.none() | st.integers(-(2**63), 2**63 - 1), st.none() | _ts,
                 st.none() | _text,
                 st.none() | st.floats(allow_nan=True, allow_infinity=True), st.none() | st.booleans())


_SQL_TYPES = {ColumnType.BIGINT: "bigint", ColumnType.TIMESTAMPTZ: "timestamptz", ColumnType.TEXT: "text",
              ColumnType.DOUBLE: "double precision", ColumnType.BOOLEAN: "boolean"}


def _copy_back(pg, cols, rows) -> list[tuple]:
    """``rows`` through arrow_to_copy_binary and a binary COPY, read back in order."""
    values = list(zip(*rows, strict=True)) if rows else [[] for _ in cols]
    table = pa.table({name: pa.array(list(v), type=ct.arrow) for (name, ct), v in zip(cols, values, strict=True)})
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS rt; CREATE TABLE rt (k serial, "
                    + ", ".join(f"{c} {_SQL_TYPES[t]}" for c, t in cols) + ")")
        copy_binary(cur, "rt", [c for c, _ in cols], arrow_to_copy_binary(table, cols))
        cur.execute(f"SELECT {', '.join(c for c, _ in cols)} FROM rt ORDER BY k")
        return cur.fetchall()


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=60))
def test_rows_split_by_chunk_keep_every_row_once_in_its_chunk_and_order(chunk_of):
    """The executor COPYs each chunk's rows into that chunk's partition (by_chunk): every
    row lands in exactly one piece, the piece of its own chunk, in its original order."""
    import numpy as np

    from archive.exec_sink import by_chunk

    table = pa.table({"row": list(range(len(chunk_of)))})
    ids = sorted(set(chunk_of))
    pieces = list(by_chunk(table, np.array(chunk_of, dtype=np.int64), ids))
    assert [c for c, _ in pieces] == ids
    for cid, rows in pieces:
        assert rows.column("row").to_pylist() == [i for i, c in enumerate(chunk_of) if c == cid]


@pytest.mark.postgres
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=40))
def test_binary_copy_round_trips_every_type_and_null(pg, rows):
    got = _copy_back(pg, COLS, rows)
    assert len(got) == len(rows)
    for want, have in zip(rows, got, strict=True):
        assert have[:3] == want[:3] and have[4] == want[4]
        assert (have[3] is None and want[3] is None) or math.isnan(want[3]) and math.isnan(have[3]) \
            or have[3] == want[3]


@pytest.mark.postgres
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), _ts, st.floats(allow_nan=False), st.booleans()),
                     min_size=1, max_size=40))
def test_binary_copy_of_fixed_width_rows_without_nulls_round_trips(pg, rows):
    """Such rows are one packed record array (archive.copy._Runs), with no join."""
    assert _copy_back(pg, [c for c in COLS if c[1] is not ColumnType.TEXT], rows) == rows


@pytest.mark.postgres
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), _ts, _text, st.floats(allow_nan=False),
                               st.booleans() | st.none()), min_size=1, max_size=40))
def test_binary_copy_of_text_without_nulls_between_fixed_runs_round_trips(pg, rows):
    """A text column without nulls ends a run of packed fields (its length is the run's
    last field) and starts the next: archive_ingest's shape. The nullable last column
    may end the row as a run or as a piece of its own."""
    assert _copy_back(pg, COLS, rows) == rows


def _source(spark, per_host: int, hosts: int, parts: int):
    frame = pd.DataFrame({"ts": [T0 + timedelta(minutes=13 * i) for i in range(per_host * hosts)],
                          "host": [f"h{i % hosts}" for i in range(per_host * hosts)],
                          "v": [i / 3 for i in range(per_host * hosts)],
                          "n": list(range(per_host * hosts))})
    frame["ts"] = frame["ts"].dt.tz_convert("UTC").dt.tz_localize(None)
    return frame, spark.createDataFrame(frame, CSV_SCHEMA).repartition(parts, "host")


def fail_once_after(fail: int, marker: Path):
    """An ``after_part`` hook (run on the executor) that fails partition ``fail`` once,
    after it committed (``marker`` records that it did)."""

    def after_part(batch_id, part):
        if part == fail and not marker.exists():
            marker.touch()
            raise RuntimeError(f"injected failure after partition {part} committed")

    return after_part


@pytest.mark.spark
@pytest.mark.postgres
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.integers(1, 6), fail=st.integers(0, 5), hosts=st.integers(1, 9))
def test_replay_after_an_executor_failed_midway_archives_each_row_once(spark, pg_dsn, tmp_path_factory, parts,
                                                                       fail, hosts):
    """Partition ``fail`` commits, then its task fails: the batch fails with some of its
    partitions written. Spark's replay of the same batch id writes only the others."""
    after_part = fail_once_after(fail % parts, tmp_path_factory.mktemp("m") / "failed")
    with fresh_archiver(pg_dsn) as arch:
        frame, df = _source(spark, 11, hosts, parts)
        write = archive_batches(arch, "metrics", after_part=after_part)
        with pytest.raises(Exception, match="injected failure"):
            write(df, 3)
        assert arch.batch_ids("metrics") == []
        results = []
        again = archive_batches(arch, "metrics", on_batch=lambda r, _df: results.append(r))
        again(df, 3)
        again(df, 3)  # a replay of a committed batch is a no-op
        got = table_rows(arch)
        assert sorted(got["n"]) == sorted(frame["n"]) and got["_sid"].is_unique
        assert results[0].rows == len(frame) and not results[0].duplicate and results[1].duplicate
        assert results[0].max_ts == max(frame["ts"]).replace(tzinfo=UTC)
        assert sum(c.rows for c in arch.chunks("metrics")) == len(frame)  # the catalog counted each row once
        with arch.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM moirae_batch_parts")
            assert cur.fetchone()[0] == 0


def _one_pass_only(monkeypatch, arch, df) -> list[int]:
    """Count the partition writers' passes over a batch (each a Spark job running the
    batch's whole plan), and fail if the driver had to create a chunk itself."""
    from archive import spark_sink

    passes = []
    real = spark_sink._Writers.run

    def counted(self, *args, **kwargs):
        passes.append(1)
        return real(self, *args, **kwargs)

    def no_driver_creation(*args, **kwargs):
        raise AssertionError(f"the driver created chunks {args}: a partition found them missing")

    monkeypatch.setattr(spark_sink._Writers, "run", counted)
    monkeypatch.setattr(arch, "ensure_chunks", no_driver_creation)
    return passes


@pytest.mark.spark
@pytest.mark.postgres
def test_a_batch_reaching_new_chunks_is_archived_in_one_spark_job(spark, archiver, monkeypatch):
    """33 rows 13 minutes apart over 7 new hourly chunks, partitioned by host (3 hosts,
    each with a row every 39 minutes, so every non-empty partition reaches every chunk;
    ``local[2]`` runs two at a time, creating the same chunks concurrently): the
    executors create the chunks, and the batch is computed once."""
    frame, df = _source(spark, 11, 3, 3)
    passes = _one_pass_only(monkeypatch, archiver, df)
    results = []
    archive_batches(archiver, "metrics", on_batch=lambda r, _df: results.append(r))(df, 0)
    assert len(passes) == 1
    assert results[0].rows == len(frame) and results[0].late_rows == 0 and len(results[0].chunks) == 7
    got = table_rows(archiver)
    assert sorted(got["n"]) == sorted(frame["n"]) and got["_sid"].is_unique
    expected = Counter(int(T0.timestamp()) // 3600 + 13 * i // 60 for i in range(len(frame)))  # hour of row i
    assert catalog_rows(archiver) == partition_counts(archiver) == expected
    assert {c.tier for c in archiver.chunks("metrics")} == {Tier.PRESENT}
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT chunks_version FROM moirae_streams WHERE stream = 'metrics'")
        assert cur.fetchone()[0] >= 1  # task-id caches see the new chunks


@pytest.mark.spark
@pytest.mark.postgres
def test_executor_created_chunks_take_their_tier_from_the_horizon(spark, archiver, monkeypatch):
    """The horizon is at T0 + 2 h: the chunks ending at or before it are created old
    (their rows count as late), the later ones present; still one Spark job."""
    archiver.demote(T0 + timedelta(hours=2))
    frame, df = _source(spark, 6, 3, 2)  # 18 rows from T0, 13 minutes apart: hours 0..3
    passes = _one_pass_only(monkeypatch, archiver, df)
    results = []
    archive_batches(archiver, "metrics", on_batch=lambda r, _df: results.append(r))(df, 0)
    assert len(passes) == 1
    tiers = {c.start - T0: c.tier for c in archiver.chunks("metrics")}
    assert tiers == {timedelta(hours=0): Tier.OLD, timedelta(hours=1): Tier.OLD,
                     timedelta(hours=2): Tier.PRESENT, timedelta(hours=3): Tier.PRESENT}
    behind = sum(1 for i in range(len(frame)) if 13 * i < 120)
    assert (results[0].rows, results[0].late_rows) == (len(frame), behind)


@pytest.mark.spark
@pytest.mark.postgres
def test_null_event_times_and_nul_text_are_dead_letters_and_late_rows_are_counted(spark, archiver):
    frame, df = _source(spark, 5, 3, 2)
    archive_batches(archiver, "metrics")(df, 0)
    archiver.demote(T0 + timedelta(hours=2))
    at = (T0 + timedelta(minutes=30)).replace(tzinfo=None)
    late = spark.createDataFrame([(at, "h9", 1.0, 1000), (None, "h9", 2.0, 1001), (at, "a\x00b", 3.0, 1002)],
                                 CSV_SCHEMA).repartition(2, "n")
    results = []
    archive_batches(archiver, "metrics", on_batch=lambda r, _df: results.append(r))(late, 1)
    assert (results[0].rows, results[0].late_rows, results[0].dead_letters) == (1, 1, 2)
    dead = {d["row"]["n"]: d["reason"] for d in archiver.dead_letters("metrics")}
    assert "no event time" in dead[1001] and "NUL" in dead[1002] and "'host'" in dead[1002]
    assert 1000 in set(table_rows(archiver)["n"])


def _write_csv(d: Path, files: int, per_file: int, hosts: int) -> list[int]:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for f in range(files):
        idx = range(f * per_file, (f + 1) * per_file)
        frame = pd.DataFrame({"ts": [(T0 + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for i in idx],
                              "host": [f"h{i % hosts}" for i in idx], "v": [i / 4 for i in idx], "n": list(idx)})
        tmp = d / f".part-{f:03d}.tmp"
        frame.to_csv(tmp, header=False, index=False)
        tmp.rename(d / f"part-{f:03d}.csv")
        out.extend(idx)
    return out


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.integers(2, 5), hang=st.integers(0, 3))
def test_sigkill_between_partition_copies_then_replay_equals_source(pg_dsn, request, tmp_path_factory, parts,
                                                                     hang):
    """A real Spark job (its own process, ``local[1]``: partitions are written one after
    the other) is SIGKILLed while batch 1 has partition ``hang`` committed and the
    partitions after it not written. A new process replays batch 1 from the checkpoint."""
    if request.node.callspec.params.get("pg_dsn") != "embedded":
        pytest.skip("the process-kill test runs on the embedded backend only")
    hang %= parts - 1  # never the last partition: some COPYs are still to come
    tmp = tmp_path_factory.mktemp("kill")
    db = Database(pg_dsn, schema=f"k_{uuid.uuid4().hex[:12]}")
    arch = make_archiver(db)
    arch.register_stream(metrics_spec())
    try:
        expected = _write_csv(tmp / "src", files=3, per_file=40, hosts=11)
        log = tmp / "log.jsonl"
        base = [sys.executable, "-m", "tests.archive.spark_child", db.dsn, db.schema, str(tmp / "src"),
                str(tmp / "ckpt"), str(log), "--parts", str(parts)]
        env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}
        child = subprocess.Popen([*base, "--hang-on", "1", "--hang-part", str(hang)], env=env,
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and child.poll() is None:
                if log.exists() and any("part" in json.loads(x) for x in log.read_text().splitlines()):
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"child never reached the hang: {child.stderr.read().decode()[-2000:]}")
        finally:
            os.killpg(child.pid, signal.SIGKILL)  # the child, its JVM and its Python workers
            child.wait(30)
        assert arch.batch_ids("metrics") == [0]
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT part FROM moirae_batch_parts WHERE batch_id = 1")
            written = {r[0] for r in cur.fetchall()}
        assert len(written) < parts  # the partitions after the hang were never written
        assert 40 <= len(table_rows(arch)) < 80  # batch 0 and part of batch 1 are in PostgreSQL
        done = subprocess.run(base, env=env, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert arch.batch_ids("metrics") == [0, 1, 2]
        got = table_rows(arch)
        assert got["n"].tolist() == sorted(expected) and got["_sid"].is_unique
        assert sum(c.rows for c in arch.chunks("metrics")) == len(expected)
    finally:
        arch.close()
        db.drop_schema()


@pytest.mark.spark
@pytest.mark.postgres
def test_first_batch_fixes_the_streams_interval_from_its_rate(spark, pg):
    """With ``chunk_target_rows``, the stream's interval is chosen from its first batch's
    rate (archive.chunks), on the executor path as on the driver's: 33 rows 13 minutes
    apart, 10 rows per chunk -> about 130 minutes per chunk, rounded down to the ladder's
    2 hours; every row lands in a chunk of that grid."""
    arch = make_archiver(pg, span=timedelta(minutes=7), chunk_target_rows=10)
    arch.register_stream(metrics_spec())
    try:
        frame, df = _source(spark, 11, 3, 2)
        assert not arch.has_interval("metrics")
        archive_batches(arch, "metrics")(df, 0)
        assert arch.has_interval("metrics")
        grid = arch.grid_of("metrics")
        assert grid.span == timedelta(hours=2)  # the ladder's step below 33 rows / 7 h * 10 rows
        infos = arch.chunks("metrics")
        assert sum(c.rows for c in infos) == len(frame)
        assert all(c.end - c.start == grid.span for c in infos)
    finally:
        arch.close()


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.parametrize("target_rows, reads", [(10, 2), (None, 1)])
def test_the_first_batch_is_counted_only_when_its_rate_chooses_the_interval(spark, pg, target_rows, reads):
    """The count of the first batch (rows, first and last time) is one more Spark job,
    which reads the batch a second time; without ``chunk_target_rows`` the interval is
    ``chunk_span`` whatever the rate, so the batch is read once, by the writers. An
    accumulator counts the event times the source yields (the count reads only those),
    over every job of the batch."""
    from pyspark.sql import functions as F

    arch = make_archiver(pg, span=timedelta(minutes=7), chunk_target_rows=target_rows)
    arch.register_stream(metrics_spec())
    yielded = spark.sparkContext.accumulator(0)

    def seen(ts):
        yielded.add(1)
        return ts

    try:
        frame, df = _source(spark, 11, 3, 2)
        archive_batches(arch, "metrics")(df.withColumn("ts", F.udf(seen, "timestamp")("ts")), 0)
        assert yielded.value == reads * len(frame)
        assert arch.grid_of("metrics").span == (timedelta(hours=2) if target_rows else timedelta(minutes=7))
        assert sum(c.rows for c in arch.chunks("metrics")) == len(frame)
    finally:
        arch.close()


def test_a_task_without_its_batch_property_refuses_to_write(archiver):
    """The stream's writer is one UDF for every batch; the batch id comes with the job.
    A task that did not get it (a job the sink did not start) writes nothing."""
    from archive.exec_udf import BATCH_PROPERTY, StreamWriter, batch_property

    writer = StreamWriter("dbname=unused", "s", archiver.stream("metrics"))
    with pytest.raises(RuntimeError, match=BATCH_PROPERTY):
        writer.job(None)
    horizon = T0 + timedelta(hours=2)
    job = writer.job(batch_property(41, 3_600_000_000, horizon, bulk=True))
    assert (job.batch_id, job.span_us, job.horizon, job.bulk, job.spec.name) == (41, 3_600_000_000, horizon, True,
                                                                                  "metrics")
