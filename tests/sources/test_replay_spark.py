"""The replay source in real Spark Structured Streaming.

The poster's correctness claim (DEBS'19 §2.3): because event times are never changed,
an event-time windowed query whose watermark covers the maximum delay gives the same
result whatever the out-of-order fraction and seed. A watermark below the delays must
lose rows, which shows the check can fail.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from moirae.sources.disorder import ReplayConfig
from moirae.sources.replay import replay_file
from moirae.sources.spark_replay import register_replay_source

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 600  # one event per 100 ms: a minute of event time


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "small.csv"
    i = np.arange(N)
    pd.DataFrame({"ts": i * 100, "k": i % 3, "v": (i * 7) % 11}).to_csv(path, index=False)
    return path


def stream(spark, path, **opts):
    register_replay_source(spark)
    reader = (spark.readStream.format("moirae_replay").option("path", str(path)).option("ts_col", "ts")
              .option("unit", "ms").option("speedup", "max").option("maxRowsPerBatch", "100"))
    for key, value in opts.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start_windowed(spark, path, watermark: str, **opts):
    """Start an update-mode windowed count/sum; returns (query, final per-(window, key) dict)."""
    df = stream(spark, path, maxRowsPerBatch=200, **opts)
    agg = (df.withWatermark("ts", watermark)
           .groupBy(F.window("ts", "5 seconds"), "k")
           .agg(F.count("*").alias("n"), F.sum("v").alias("s")))
    final: dict = {}
    lock = threading.Lock()

    def sink(batch, batch_id):
        rows = batch.collect()
        with lock:
            for r in rows:
                final[(r["window"]["start"], r["k"])] = (r["n"], r["s"])

    q = agg.writeStream.outputMode("update").foreachBatch(sink).trigger(availableNow=True).start()
    return q, final


def test_windowed_results_do_not_depend_on_disorder(spark, small_csv):
    # Delays up to 30 s span two micro-batches (200 rows = 20 s of event time), so a
    # watermark below them really drops rows (Spark filters late rows with the previous
    # batch's watermark); a watermark of 30 s covers them all.
    delays = dict(min_delay_ms=500, max_delay_ms=30_000)
    plans = {
        "in order": ("30 seconds", dict(out_of_order=0)),
        "30% seed 1": ("30 seconds", dict(out_of_order=30, seed=1, **delays)),
        "70% seed 2": ("30 seconds", dict(out_of_order=70, seed=2, **delays)),
        "lossy": ("0 seconds", dict(out_of_order=30, seed=1, **delays)),
    }
    runs = {}
    for name, (watermark, opts) in plans.items():  # one at a time: Python workers are scarce
        q, final = start_windowed(spark, small_csv, watermark, **opts)
        q.awaitTermination(240)
        assert len(q.recentProgress) >= 3, name  # really several micro-batches
        runs[name] = (q, final)
    baseline = runs["in order"][1]
    assert sum(n for n, _ in baseline.values()) == N
    assert runs["30% seed 1"][1] == baseline
    assert runs["70% seed 2"][1] == baseline
    # Negative control: a watermark far below the delays loses late rows.
    assert sum(n for n, _ in runs["lossy"][1].values()) < N


def test_restart_resumes_at_exact_row_position(spark, small_csv, tmp_path):
    opts = dict(out_of_order=40, seed=5, min_delay_ms=100, max_delay_ms=2000)
    batches: dict[int, list] = {}

    def sink(batch, batch_id):
        batches[batch_id] = [(r["ts"], r["k"], r["v"]) for r in batch.collect()]

    ckpt = str(tmp_path / "ckpt")
    q = (stream(spark, small_csv, **opts).writeStream.foreachBatch(sink)
         .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 60
    while len(batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    q.stop()
    first_run = len(batches)
    assert 2 <= first_run and sum(map(len, batches.values())) < N
    q2 = (stream(spark, small_csv, **opts).writeStream.foreachBatch(sink)
          .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q2.awaitTermination(120)
    assert len(batches) > first_run
    delivered = [row for bid in sorted(batches) for row in batches[bid]]
    expected = replay_file(small_csv, ReplayConfig(ts_col="ts", unit="ms", speedup="max", **opts)).rows
    assert [(int(k), int(v)) for _, k, v in delivered] == list(zip(expected["k"], expected["v"], strict=True))
    assert len(delivered) == N


def test_batch_read_and_paced_stream(spark, small_csv):
    register_replay_source(spark)
    batch = (spark.read.format("moirae_replay").option("path", str(small_csv)).option("ts_col", "ts")
             .option("unit", "ms").option("out_of_order", "20").load())
    assert batch.count() == N and set(batch.columns) == {"ts", "k", "v", "ingest_ts", "delay_ms"}
    # 60 s of event time at 20x: about 3 s of wall time, so the first batches cannot hold everything.
    df = stream(spark, small_csv, speedup=20, maxRowsPerBatch=10_000)
    q = df.writeStream.format("memory").queryName("paced_replay").trigger(processingTime="100 milliseconds").start()
    time.sleep(1.0)
    early = spark.sql("select count(*) c from paced_replay").collect()[0]["c"]
    q.processAllAvailable()
    deadline = time.monotonic() + 30
    while spark.sql("select count(*) c from paced_replay").collect()[0]["c"] < N and time.monotonic() < deadline:
        time.sleep(0.2)
    q.stop()
    assert early < N
    assert spark.sql("select count(*) c from paced_replay").collect()[0]["c"] == N
