"""The cluster scenario's live source and the host monitor, in real Spark streaming."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moirae.sources.cluster import ClusterScenario
from moirae.sources.host import register_host_source
from moirae.sources.spark_cluster import register_cluster_source, spec_from_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SCENARIO = str(Path(__file__).resolve().parents[2] / "config" / "scenarios" / "cluster.yaml")


def test_cluster_live_source_matches_generator(spark, tmp_path):
    register_cluster_source(spark)
    opts = {"config": SCENARIO, "stream": "metrics", "speedup": "max", "maxSpanSeconds": "600",
            "start": "2025-09-30T00:00:00Z", "until": "2025-09-30T00:20:00Z",
            "out_of_order": "20", "max_delay_ms": "30000"}
    reader = spark.readStream.format("moirae_cluster")
    for k, v in opts.items():
        reader = reader.option(k, v)
    batches: dict[int, pd.DataFrame] = {}

    def sink(df, batch_id):
        batches[batch_id] = df.toPandas()

    q = reader.load().writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert len([b for b in batches.values() if len(b)]) == 2  # two 10-minute spans
    got = pd.concat([batches[k] for k in sorted(batches)], ignore_index=True)
    spec = spec_from_options(opts)
    expected = ClusterScenario(spec.config).live(spec.start_ns, spec.until_ns, "metrics", since_ns=spec.start_ns)
    assert len(got) == len(expected) > 0
    assert got["sid"].tolist() == expected["sid"].tolist()
    np.testing.assert_allclose(got["bw"].to_numpy(), expected["bw"].to_numpy())
    ts = pd.to_datetime(got["ts"]).dt.tz_localize("UTC") if pd.to_datetime(got["ts"]).dt.tz is None \
        else pd.to_datetime(got["ts"])
    assert (ts.diff().dropna() < pd.Timedelta(0)).any()  # delivered out of order


def test_host_monitor_produces_real_rows(spark):
    register_host_source(spark)
    for stream, cols in (("metrics", ["ts", "sid", "cpu", "mem", "bw"]), ("procs", ["ts", "sid", "proc"])):
        df = spark.readStream.format("moirae_host").option("stream", stream).option("period_s", "1").load()
        assert df.columns == cols
        name = f"host_{stream}"
        q = df.writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds").start()
        deadline = time.monotonic() + 120
        rows = []
        while not rows and time.monotonic() < deadline:
            time.sleep(0.5)
            rows = spark.sql(f"select * from {name}").collect()
        q.stop()
        assert rows, f"no micro-batch from moirae_host stream={stream}"
        assert {r["sid"] for r in rows} == {socket.gethostname()}
        if stream == "metrics":
            assert all(0 <= r["cpu"] <= 100 and 0 < r["mem"] <= 100 and r["bw"] >= 0 for r in rows)
        else:
            assert len({r["proc"] for r in rows}) > 1
