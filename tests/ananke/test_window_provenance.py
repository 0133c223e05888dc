"""A window's provenance through Spark's state store pairs each id with its own time.

The window keeps the ids and the times of its tuples in two lists (``ananke.query``) and
zips them when it emits. Here windows span several micro-batches (so their state is
saved, restored and merged) and several partitions, and every emitted window must name
exactly its tuples, each with its own event time.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from ananke.examples import workload
from ananke.ids import PROV, source_id_col
from ananke.query import ProvQuery

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "ts timestamp, k long, v double"
T0 = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)


def test_window_provenance_pairs_ids_with_their_times_across_batches(spark, tmp_path):
    rnd = random.Random(7)
    rows = [{"ts": T0 + timedelta(milliseconds=rnd.randrange(0, 120_000)), "k": rnd.randrange(12),
             "v": float(rnd.randrange(1000))} for _ in range(6000)]
    rows.sort(key=lambda r: r["ts"])
    rows.append({"ts": T0 + timedelta(minutes=10), "k": 99, "v": 0.0})  # moves the watermark past every window
    workload.write_files(rows, tmp_path / "in", 1000)

    static = spark.createDataFrame([(r["ts"], r["k"], r["v"]) for r in rows], SCHEMA)
    time_of, expected = {}, defaultdict(set)
    for r in static.select("k", "ts", source_id_col("s", "ts", ["k", "v"]).alias("id")).collect():
        time_of[r["id"]] = r["ts"]
        start = r["ts"].replace(microsecond=0) - timedelta(seconds=r["ts"].second % 30)
        expected[(r["k"], start)].add((r["id"], r["ts"]))

    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    q = ProvQuery()
    src = q.source(stream, "s", "ts", cols=["k", "v"], lateness="0 seconds")
    sink = src.window("30 seconds", keys=["k"], aggs=[], bounds=True).sink("w")
    seen: dict = {}

    def keep(batch_df, _batch_id):
        for r in batch_df.collect():
            seen[(r["k"], r["window_start"])] = {(p["id"], p["ts"]) for p in r[PROV]}

    query = (sink.df.writeStream.foreachBatch(keep).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    for key, pairs in seen.items():
        assert all(time_of[i] == ts for i, ts in pairs), f"window {key}: an id with another tuple's time"
    want = {key: pairs for key, pairs in expected.items() if key[0] != 99}
    assert {key: pairs for key, pairs in seen.items() if key[0] != 99} == want
    assert len(want) == 12 * 4
