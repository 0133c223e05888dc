"""Live-path overhead of how-provenance polynomials (H 4; ``ananke.polynomials``).

The overload event-query (a 5-minute average bandwidth per host above a threshold, M
fig. 1) runs over the same generated readings, as JSON files read as a stream
(``availableNow``, a few thousand rows per micro-batch), on the event-query's live
provenance path: the instrumented plan, one collect per batch, ANK-1 writing the graph to
PostgreSQL (:class:`ananke.store.GraphStore`) and, with polynomials on, each alert's
polynomial to ``ank_poly`` (:class:`ananke.poly_store.PolyStore`). The windows keep
their provenance as lists in Spark's state (``ananke.window_provenance: state``), where
polynomials cost the most: one more ``collect_list`` per aggregated column in every open
window's state. (With the default digest mode the values are instead read from the
archive once per batch, with the ids the digest resolves to.)

Throughput = input rows / wall time until the query has drained the input. ``off`` and
``on`` run alternately in one process and one Spark session (each position equally
often, :func:`bench.harness.run_orders`), after one discarded warm-up run of each. Goal:
on / off >= 0.9x.

Run: ``python -m bench.provenance.poly_overhead [--quick] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from bench.harness import ROOT, exit_code, publish, run_orders, target, verdict

MEASURES = ("bench/provenance/poly_overhead.py", "ananke/query.py", "ananke/poly_spark.py", "ananke/poly_store.py",
            "ananke/spark_adapter.py")
CONFIGS = ("off", "on")
T0 = datetime(2024, 3, 1, tzinfo=UTC)
THRESHOLD = 62.0


def write_input(folder: Path, rows: int, hosts: int, files: int) -> None:
    """``rows`` readings of ``hosts`` hosts every 10 s, in ``files`` JSON-lines files; a
    host's bandwidth drifts so that some windows cross the threshold."""
    rng = np.random.default_rng(7)
    per = rows // files
    for f in range(files):
        lines = []
        for i in range(f * per, (f + 1) * per):
            h = i % hosts
            t = T0 + timedelta(seconds=10 * (i // hosts))
            bw = 50 + 15 * np.sin(i / (hosts * 40) + h) + rng.normal(0, 5)
            lines.append(json.dumps({"ts": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "host": f"h{h}", "bw": round(bw, 3)}))
        (folder / f"p{f:04d}.json").write_text("\n".join(lines) + "\n")


def run_once(spark, db, folder: Path, polynomials: bool, work: Path) -> dict:
    from pyspark.sql import functions as F

    from ananke.ank1 import Ank1
    from ananke.poly_store import PolyStore
    from ananke.query import ProvQuery
    from ananke.spark_adapter import Ank1SparkSink
    from ananke.store import GraphStore

    tag = uuid.uuid4().hex[:6]
    q = ProvQuery(polynomials=polynomials)
    df = spark.readStream.schema("ts timestamp, host string, bw double").option("maxFilesPerTrigger", 1).json(str(folder))
    m = q.source(df, "metrics", "ts", lateness="30 seconds")
    w = m.window("5 minutes", keys=["host"], aggs=[F.avg("bw").alias("avg_bw"), F.max("bw").alias("max_bw")],
                 ts_out="ts")
    sink = (w.filter(F.col("avg_bw") > THRESHOLD)
            .with_column("eid", F.concat_ws(":", F.lit("ov"), F.col("host"), F.date_format("ts", "yyyyMMddHHmm")))
            .sink("overload"))
    graph = GraphStore(db.connect, prefix=f"ank_b{tag}", borrow=db.connection).create()
    store = None
    if polynomials:
        store = PolyStore(db.connect, prefix=f"ank_poly_{tag}", borrow=db.connection).create()
        store.put_plan(sink.poly)
    logic = Ank1.from_query(q).build(emit=graph)
    adapter = Ank1SparkSink(sink, logic, deliver_frame=lambda f, b: None,
                            polys=(lambda rows: store.put("overload", rows)) if store else None)
    t0 = time.perf_counter()
    query = adapter.start(str(work / f"ck_{tag}"), {"availableNow": True})
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "alerts": adapter.rows, "phases": dict(adapter.seconds),
           "poly_bytes": store.nbytes() if store else 0}
    graph.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40,000 rows, 2 rounds")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    rows, files = (40_000, 8) if args.quick else (400_000, 40)
    rounds = args.rounds or (2 if args.quick else 4)
    name = "poly_overhead_quick" if args.quick else "poly_overhead"

    from archive import Database
    from moirae.runtime.spark import spark_session

    db = Database.from_env(ROOT / ".moirae-bench", schema=f"bench_polyov_{uuid.uuid4().hex[:8]}")
    spark = spark_session(master="local[2]", app_name="bench-poly-overhead")
    work = Path(tempfile.mkdtemp(prefix="polyov_"))
    try:
        folder = work / "in"
        folder.mkdir()
        write_input(folder, rows, 20, files)
        for c in CONFIGS:  # warm-up, discarded
            run_once(spark, db, folder, c == "on", work)
        runs: dict[str, list[dict]] = {c: [] for c in CONFIGS}
        for order in run_orders(CONFIGS, rounds):
            for c in order:
                r = run_once(spark, db, folder, c == "on", work)
                runs[c].append(r)
                print(f"{c}: {rows / r['seconds']:,.0f} rows/s, {r['alerts']} alerts", flush=True)
        thr = {c: [rows / r["seconds"] for r in runs[c]] for c in CONFIGS}
        ratios = [a / b for a, b in zip(thr["on"], thr["off"], strict=True)]
        data = {"quick": args.quick, "rows": rows, "files": files, "rounds": len(ratios), "throughput": thr,
                "ratio": ratios, "alerts": runs["on"][-1]["alerts"], "poly_bytes": runs["on"][-1]["poly_bytes"],
                "phases_on": runs["on"][-1]["phases"], "phases_off": runs["off"][-1]["phases"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        db.drop_schema()
        db.close()
    ts = targets(data)
    publish(name, data, render(data), None, targets=ts)
    print(render(data))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    r = data["ratio"]
    return [target("polynomials: event-query live-path throughput, polynomials on / off", ">= 0.9x",
                   f"{statistics.median(r):.2f}x (rounds {min(r):.2f}-{max(r):.2f}x)", verdict(r, 0.9))]


def render(data: dict) -> str:
    thr = data["throughput"]
    return ("## Polynomials: live-path overhead\n\n"
            f"The overload event-query over {data['rows']:,} readings in {data['files']} micro-batches, windows' "
            "provenance as lists in Spark's state, ANK-1 writing the graph to PostgreSQL, with polynomials off and "
            f"on (each alert's polynomial to `ank_poly`), alternating, {data['rounds']} rounds each "
            "(`bench/provenance/poly_overhead.py`).\n\n"
            "| polynomials | rows/s (median) | rounds |\n|---|---:|---|\n"
            + "\n".join(f"| {c} | {statistics.median(thr[c]):,.0f} | "
                        f"{', '.join(f'{x:,.0f}' for x in thr[c])} |" for c in CONFIGS)
            + f"\n\nOn / off: {statistics.median(data['ratio']):.2f}x; {data['alerts']} alerts, their polynomials "
            f"{data['poly_bytes'] / 1024:.0f} KiB." + (" Quick run." if data["quick"] else ""))


if __name__ == "__main__":
    raise SystemExit(main())
