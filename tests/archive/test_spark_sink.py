"""Exactly-once archiving of a Spark stream across crashes (DESIGN.md §4 flow 1, §6):
Spark replays an uncommitted micro-batch with the same id after a restart from its
checkpoint, and the Archiver's batch log turns the replay into a no-op."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from archive.spark_sink import archive_batches
from tests.archive.arch_helpers import T0, rows, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

CSV_SCHEMA = "ts timestamp, host string, v double, n bigint"
HERE = Path(__file__).resolve().parent


class Crash(RuntimeError):
    """Raised inside foreachBatch after the append committed: a crash before Spark's commit."""


def write_csv_files(d: Path, files: int, per_file: int):
    d.mkdir(parents=True, exist_ok=True)
    expected = []
    for f in range(files):
        frame = rows(per_file, start=T0 + timedelta(minutes=37 * f * per_file), first=f * per_file)
        frame["ts"] = frame["ts"].map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        # the file appears atomically, as a file source requires
        tmp = d / f".part-{f:03d}.tmp"
        frame.to_csv(tmp, header=False, index=False)
        tmp.rename(d / f"part-{f:03d}.csv")
        expected.extend(frame["n"])
    return expected


def _run(spark, archiver, src, checkpoint, on_batch):
    stream = spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", 1).csv(str(src))
    return (stream.writeStream.foreachBatch(archive_batches(archiver, "metrics", on_batch))
            .option("checkpointLocation", str(checkpoint)).start())


def assert_archive_equals_source(archiver, expected):
    got = table_rows(archiver)
    assert len(got) == len(expected)
    assert got["n"].tolist() == sorted(expected)  # no duplicates, no gaps
    assert got["_sid"].is_unique


def test_crash_after_db_commit_before_spark_commit_replays_as_no_op(spark, archiver, tmp_path):
    expected = write_csv_files(tmp_path / "src", files=5, per_file=30)
    seen = []

    def crash_on_2(result, _df):
        seen.append((result.batch_id, result.duplicate))
        if result.batch_id == 2 and not result.duplicate:
            raise Crash("simulated crash after the archive commit of batch 2")

    query = _run(spark, archiver, tmp_path / "src", tmp_path / "ckpt", crash_on_2)
    with pytest.raises(Exception, match="simulated crash"):
        query.awaitTermination(120)
    assert archiver.batch_ids("metrics") == [0, 1, 2]  # batch 2 is in PostgreSQL ...
    assert len(table_rows(archiver)) == 90

    query = _run(spark, archiver, tmp_path / "src", tmp_path / "ckpt", crash_on_2)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert (2, True) in seen  # ... and Spark replayed it: the batch log made that a no-op
    assert [b for b, dup in seen if not dup] == [0, 1, 2, 3, 4]
    assert archiver.batch_ids("metrics") == [0, 1, 2, 3, 4]
    assert_archive_equals_source(archiver, expected)


def test_stop_mid_stream_and_restart_with_more_files(spark, archiver, tmp_path):
    src = tmp_path / "src"
    expected = write_csv_files(src, files=3, per_file=20)
    query = _run(spark, archiver, src, tmp_path / "ckpt", None)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    more = write_csv_files(tmp_path / "more", files=6, per_file=20)[60:]
    for f in sorted((tmp_path / "more").glob("part-00[3-5].csv")):
        f.rename(src / f.name)
    query = _run(spark, archiver, src, tmp_path / "ckpt", None)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert_archive_equals_source(archiver, expected + more)


@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_leaves_archive_equal_to_source(archiver, tmp_path, request):
    """A real process kill: the job is SIGKILLed after batch 2 is in PostgreSQL and before
    Spark commits it; a new process resumes from the checkpoint. Two extra Spark launches,
    so it runs on the embedded backend only (the in-process crash test covers both)."""
    if request.node.callspec.params.get("pg_dsn") != "embedded":
        pytest.skip("the process-kill test runs on the embedded backend only")
    expected = write_csv_files(tmp_path / "src", files=5, per_file=25)
    log = tmp_path / "log.jsonl"
    db = archiver.db
    base = [sys.executable, "-m", "tests.archive.spark_child", db.dsn, db.schema, str(tmp_path / "src"),
            str(tmp_path / "ckpt"), str(log)]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}
    child = subprocess.Popen([*base, "--hang-on", "2"], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and child.poll() is None:
            if log.exists() and any(json.loads(x)["batch"] == 2 for x in log.read_text().splitlines()):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"child never archived batch 2: {child.stderr.read().decode()[-2000:]}")
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the child and its JVM, nothing else
        child.wait(30)
    assert archiver.batch_ids("metrics") == [0, 1, 2]
    done = subprocess.run(base, env=env, capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    results = [json.loads(x) for x in log.read_text().splitlines()]
    assert {"batch": 2, "rows": 0, "duplicate": True} in results  # replayed after the kill
    assert archiver.batch_ids("metrics") == [0, 1, 2, 3, 4]
    assert_archive_equals_source(archiver, expected)
