"""``moirae run``: the main job.

Version 1 streams a built-in synthetic metrics stream (Spark's rate source shaped like
the cluster scenario's metrics) into the archive for the duration, then prints the
archive status.
"""

from __future__ import annotations

import json

from moirae.cli import install_sigterm
from moirae.commands.registry import command
from moirae.status_view import render_status


def synthetic_metrics(spark, rows_per_second: int = 50, servers: int = 10):
    """A live metrics stream (ts, sid, cpu, mem, bw) from Spark's rate source."""
    from pyspark.sql import functions as F

    rate = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    sid = F.concat(F.lit("s"), F.lpad((F.col("value") % servers).cast("string"), 2, "0"))
    return rate.select(
        F.col("timestamp").alias("ts"),
        sid.alias("sid"),
        (F.rand(1) * 100).alias("cpu"),
        (F.rand(2) * 64).alias("mem"),
        (F.abs(F.randn(3)) * 20 + 50).alias("bw"),
    )


@command("run")
def run(args) -> int:
    from moirae import Engine

    install_sigterm()
    overrides = {"scenario": args.scenario} if args.scenario else {}
    engine = Engine.from_config(args.config, **overrides)
    try:
        print(f"moirae: archive in {engine.db.dsn.split('?')[0]} schema {engine.settings.postgres.schema}; "
              f"data dir {engine.data_dir}")
        engine.source("metrics", synthetic_metrics(engine.spark), ts="ts", indexes=[("sid",)])
        engine.start()
        server = _serve_api(engine)
        print("moirae: streaming" + (f" for {args.duration:g}s" if args.duration else " until Ctrl-C"))
        try:
            engine.run_for(args.duration)
        except KeyboardInterrupt:
            print("moirae: stopping")
        if server is not None:
            server.stop()
        engine.stop()
        status = engine.status()
        print(json.dumps(status, default=str) if args.json else render_status(status))
    finally:
        engine.close()
    return 0


def _serve_api(engine):
    """Serve the HTTP API and console over the running engine (DESIGN.md §5); if the
    address is taken, say so and run without it."""
    from moirae.api import ApiError, serve

    try:
        server = serve(engine)
    except ApiError as exc:
        print(f"moirae: API not served: {exc}")
        return None
    print(f"moirae: API and console on {server.url}/")
    return server
