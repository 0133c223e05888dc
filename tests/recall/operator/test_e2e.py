"""The task-migration example (M fig. 10) end to end: process history archived from a
Spark DataFrame through the Archive sink into PostgreSQL chunks, the overload detected
by an event-query run on Spark, the Recall operator driven by the Recall Manager over
the real Archiver, and the revision-aware aggregate / filter / join downstream."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from recall.api import OutputKind
from tests.recall.operator.recall_op_migration import (
    DAY,
    EXPECTED,
    PINGS_AFTER,
    PINGS_BEFORE,
    Pipeline,
    load_stream,
    procs_history,
    recall_operator,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def detect_overload(load):
    """The event-query (a DataFrame -> DataFrame function, M 3.1): an overloaded node,
    with the lightly loaded nodes at that moment."""
    from pyspark.sql import functions as F

    over = load.where(F.col("load") > 0.9).select(
        F.concat(F.lit("overload-"), F.col("node")).alias("eid"), "ts", "node")
    light = load.where(F.col("load") < 0.3).groupBy("ts").agg(F.sort_array(F.collect_list("node")).alias("nodes"))
    return over.join(light, "ts").select("eid", F.col("ts").cast("double").alias("epoch"), "node", "nodes")


def test_migration_end_to_end(spark, pg):
    from archive.archiver import Archiver
    from archive.settings import ArchiveSettings
    from archive.spark_sink import archive_batches, spec_from_spark_schema
    from recall.manager import RecallManager

    arch = Archiver(pg, ArchiveSettings(chunk_span=DAY))
    try:
        procs = spark.createDataFrame(procs_history())
        arch.register_stream(spec_from_spark_schema("procs", procs.schema, "ts"))
        archive_batches(arch, "procs")(procs, 0)  # what foreachBatch calls for batch 0
        assert len(arch.chunk_ids(["procs"])) == 5

        [ev] = detect_overload(spark.createDataFrame(load_stream())).collect()
        event = {"eid": ev["eid"], "ts": datetime.fromtimestamp(ev["epoch"], UTC), "node": ev["node"],
                 "nodes": list(ev["nodes"])}
        assert event["nodes"] == ["n1", "n2"] and event["eid"] == "overload-n0"

        pipes = {a: Pipeline(a) for a in ("event", "present")}  # one recall feeds both
        for pipe in pipes.values():
            for p in PINGS_BEFORE:
                pipe.on_ping(p)
        first = threading.Event()

        def sink(out):
            for pipe in pipes.values():
                pipe.on_output(out)
            if out.kind is not OutputKind.BOUNDARY and not first.is_set():
                first.set()
                for pipe in pipes.values():
                    for p in PINGS_AFTER:  # the network changes while history is recalled
                        pipe.on_ping(p)

        op = recall_operator(store=arch)
        with RecallManager(arch, max_concurrent=1, on_output=sink) as mgr:
            mgr.register(op)
            mgr.submit(event, "proc_history")
            deadline = time.monotonic() + 60
            while event["eid"] in mgr.open_events() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert event["eid"] not in mgr.open_events()

        pipe = pipes["event"]
        heavy_then_light = pipe.avg_cpu_history('["n1", "p1"]')
        assert heavy_then_light[0] == ("insert", 95.0) and heavy_then_light[-1] == ("update", 27.0)
        assert [k for k, _ in heavy_then_light[1:]] == ["update"] * (len(heavy_then_light) - 1)
        assert pipe.history[-1].kind is OutputKind.BOUNDARY
        assert set(pipe.recalled.rows(event["eid"])) == {'["n1", "p1"]', '["n2", "p2"]', '["n2", "p3"]'}
        for analysis, pipe in pipes.items():
            assert pipe.final() == EXPECTED[analysis], analysis
            for o in (pipe.worst, pipe.light, pipe.ping, pipe.near):
                assert event["eid"] not in o.events  # the boundary released the state
    finally:
        arch.close()
