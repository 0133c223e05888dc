"""The engine end to end on real Spark and PostgreSQL: sources are archived exactly once,
and a restarted engine resumes from its checkpoints without loss or duplicates."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SCHEMA = "ts timestamp, sid string, bw double"


def _write_csv(folder, n, start):
    rows = pd.DataFrame({
        "ts": pd.date_range("2024-03-01", periods=1000, freq="7s", tz="UTC")[start:start + 100].strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sid": [f"s{i % 4}" for i in range(start, start + 100)],
        "bw": [float(i) for i in range(start, start + 100)],
    })
    rows.to_csv(folder / f"part-{n:03d}.csv", index=False, header=False)


def _engine(tmp_path, pg, monkeypatch):
    return make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "200ms"}, archive={"chunk_span": "10m", "chunk_target_rows": 0})


def _wait_rows(engine, n, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.status()["totals"]["rows"] >= n:
            return
        time.sleep(0.3)
    raise AssertionError(f"archive has {engine.status()['totals']['rows']} rows, expected {n}")


def _start(engine, spark, folder, files_per_trigger=1):
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger).csv(str(folder))
    engine.source("metrics", df, ts="ts", lateness="1 minute", indexes=[("sid",)])
    engine.start()


def test_restart_resumes_without_loss_or_duplicates(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    for n in range(3):
        _write_csv(folder, n, n * 100)
    engine = _engine(tmp_path, pg, monkeypatch)
    _start(engine, spark, folder)
    _wait_rows(engine, 300)
    engine.close()

    for n in range(3, 6):  # more data arrives while the engine is down
        _write_csv(folder, n, n * 100)
    engine = _engine(tmp_path, pg, monkeypatch)
    _start(engine, spark, folder)
    _wait_rows(engine, 600)
    time.sleep(1.0)  # a further trigger must not re-append anything
    engine.close()

    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT (ts, sid, bw)), min(bw), max(bw), count(DISTINCT _sid) FROM metrics")
        total, distinct, lo, hi, ids = cur.fetchone()
    assert (total, distinct, lo, hi, ids) == (600, 600, 0.0, 599.0, 600)


def test_watermark_drives_demotion(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    for n in range(10):
        _write_csv(folder, n, n * 100)
    engine = _engine(tmp_path, pg, monkeypatch)
    _start(engine, spark, folder, files_per_trigger=4)
    _wait_rows(engine, 1000)
    time.sleep(1.0)  # let progress report the final watermark
    engine.stop()
    wm = engine.archiver.horizon("metrics")
    chunks = engine.archiver.chunks("metrics")
    engine.close()
    assert wm is not None
    # The stream spans 7000 s in 10-minute chunks: everything ending before the watermark
    # (max ts - 1 minute) left the present tier; the newest chunk did not.
    assert all((c.tier.value != "present") == (c.end <= wm) for c in chunks)
    assert chunks[0].tier.value == "present"
    assert sum(c.rows for c in chunks) == 1000
