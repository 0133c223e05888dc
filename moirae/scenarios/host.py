"""The ``host`` scenario: this machine's real metrics, users and processes (psutil),
with the same streams and queries as the cluster scenario (no incidents stream). The
overload threshold is the host's network traffic in Mbit/s (``MOIRAE_HOST_BW_THRESHOLD``,
default 50)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from moirae.scenarios.queries import deploy_queries
from moirae.sources.host import FORMAT, HOST_STREAMS, register_host_source

if TYPE_CHECKING:
    from moirae.engine.engine import Engine


def deploy(engine: Engine, live: bool = True, progress: bool = True, materialize: bool = True) -> dict:
    spark = engine.spark
    register_host_source(spark)
    for stream in HOST_STREAMS:
        df = spark.readStream.format(FORMAT).option("stream", stream).option("period_s", "5").load()
        engine.source(stream, df, ts="ts", lateness="10 seconds", indexes=[("sid",)])
    threshold = float(os.environ.get("MOIRAE_HOST_BW_THRESHOLD", "50"))
    deploy_queries(engine, threshold=threshold, incidents=False)
    return {"scenario": "host", "threshold": threshold}
