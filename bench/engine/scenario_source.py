"""The cluster scenario's Spark source against generating the same rows in pandas.

The live part of the cluster scenario reaches Spark through a Python Data Source
(``moirae_cluster``, ``moirae/sources/spark_cluster.py``): each micro-batch's span of
ingestion time is regenerated from the seed in a Python worker and handed to the JVM
as Arrow. The baseline is the same generator called directly in pandas, span by span,
for the same stream, the same spans and the same rows, in the same run.

- **pandas**: ``ClusterScenario.live(a, b, stream)`` for each span (a fresh generator
  per span, as each Spark micro-batch makes), rows counted.
- **Spark**: ``readStream.format("moirae_cluster")`` with ``speedup=max``, one day of
  scenario time a micro-batch (about 100k rows, a busy live stream's batch) and an
  ``availableNow`` trigger up to the same end, into Spark's ``noop`` sink; timed from
  the query's progress reports. A query's first micro-batch also starts its Python
  workers (15-20 s here), which a live query pays once in hours: the target is judged
  at steady state (the batches after the first) and the ratio counting the start is
  reported beside it.

Target: Spark source steady-state rows/s >= 0.5x pandas rows/s.

Run: ``python -m bench scenario_source [--quick]`` (published as ``scenario_source_quick`` when quick).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time

from bench.harness import exit_code, publish, target

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/engine/scenario_source.py", "moirae")

GOAL = 0.5
CONFIG = "config/scenarios/cluster.yaml"


def pandas_rate(config, stream: str, start_ns: int, hours: int, span_s: int) -> tuple[int, float]:
    from moirae.sources.cluster import ClusterScenario

    t = time.perf_counter()
    rows = 0
    step = span_s * 1_000_000_000
    for a in range(start_ns, start_ns + hours * 3_600_000_000_000, step):
        sc = ClusterScenario(config)  # as each Spark batch does: a fresh generator per span
        rows += len(sc.live(a, a + step, stream, since_ns=start_ns))
    return rows, time.perf_counter() - t


def spark_rate(spark, stream: str, start_ns: int, hours: int, span_s: int, tag: str) -> dict:
    """Rows and seconds of one ``availableNow`` run into Spark's ``noop`` sink, from the
    query's progress reports: in all, and at steady state (every micro-batch after the
    first, whose time includes starting the query's Python workers)."""
    def iso(ns: int) -> str:
        return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat()

    df = (spark.readStream.format("moirae_cluster").option("config", CONFIG).option("stream", stream)
          .option("start", iso(start_ns)).option("until", iso(start_ns + hours * 3_600_000_000_000))
          .option("speedup", "max").option("maxSpanSeconds", span_s).load())
    checkpoint = os.path.join(".moirae-bench", "scenario_source", f"{tag}-{time.time_ns()}")
    t = time.perf_counter()
    q = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    q.awaitTermination()
    wall = time.perf_counter() - t
    batches = [(p["numInputRows"], p["durationMs"]["triggerExecution"] / 1000) for p in q.recentProgress
               if p["numInputRows"]]
    steady = batches[1:]
    return {"rows": sum(n for n, _ in batches), "seconds": wall, "batches": len(batches),
            "first_batch_s": batches[0][1] if batches else None,
            "steady_rows": sum(n for n, _ in steady), "steady_seconds": sum(s for _, s in steady)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 scenario days instead of 7")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--span", type=int, default=86_400, help="scenario seconds a micro-batch (maxSpanSeconds)")
    ap.add_argument("--hours", type=int, default=None)
    args = ap.parse_args(argv)
    from moirae.runtime.spark import spark_session
    from moirae.sources.cluster_config import load_cluster_config
    from moirae.sources.spark_cluster import register_cluster_source

    hours = args.hours or (48 if args.quick else 168)
    span_s = args.span
    name = "scenario_source_quick" if args.quick else "scenario_source"
    config = load_cluster_config(CONFIG)
    start = config.history_end_ns
    spark = spark_session()
    register_cluster_source(spark)
    spark_rate(spark, "metrics", start, 24, span_s, "warm")  # JVM and Python workers up; not counted
    res: dict = {"pandas": [], "spark": []}
    for r in range(args.rounds):
        for method in (("pandas", "spark") if r % 2 == 0 else ("spark", "pandas")):
            if method == "pandas":
                rows, secs = pandas_rate(config, "metrics", start, hours, span_s)
                run = {"rows": rows, "seconds": secs, "rows_per_s": rows / secs}
            else:
                run = spark_rate(spark, "metrics", start, hours, span_s, f"r{r}")
                run["rows_per_s"] = run["rows"] / run["seconds"]
                run["steady_rows_per_s"] = (run["steady_rows"] / run["steady_seconds"]
                                            if run["steady_seconds"] else None)
            res[method].append(run)
            print(f"round {r} {method}: {run}", flush=True)
    med = {m: statistics.median(x["rows_per_s"] for x in v) for m, v in res.items()}
    steady = [x["steady_rows_per_s"] for x in res["spark"] if x["steady_rows_per_s"]]
    med["spark_steady"] = statistics.median(steady) if steady else 0.0
    same_rows = len({x["rows"] for v in res.values() for x in v}) == 1
    data = {"hours": hours, "span_s": span_s, "stream": "metrics", "rounds": res, "median_rows_per_s": med,
            "ratio": med["spark_steady"] / med["pandas"], "ratio_with_start": med["spark"] / med["pandas"],
            "same_rows": same_rows, "load_avg_1m": round(os.getloadavg()[0], 2)}
    ts = targets(data)
    publish(name, data, markdown(data, name), figure(data), targets=ts)
    print(markdown(data, name))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    return [target(f"scenario source: Spark `moirae_cluster` vs the same rows generated in pandas "
                   f"({data['span_s'] // 3600} h of scenario a micro-batch, steady state)",
                   f">= {GOAL}x", f"{data['ratio']:.2f}x ({data['median_rows_per_s']['spark_steady']:,.0f} vs "
                   f"{data['median_rows_per_s']['pandas']:,.0f} rows/s; {data['ratio_with_start']:.2f}x counting "
                   "the query's start)",
                   data["ratio"] >= GOAL and data["same_rows"],
                   note="" if data["same_rows"] else "the two delivered different row counts")]


def markdown(data: dict, name: str) -> str:
    rows = "\n".join(
        f"| {r} | {m} | {x['rows']:,} | {x['seconds']:.2f} | {x['rows_per_s']:,.0f} | "
        + (f"{x['batches']} | {x['first_batch_s']:.2f} | {x['steady_rows_per_s'] or 0:,.0f} |" if m == "spark"
           else "- | - | - |")
        for m, v in data["rounds"].items() for r, x in enumerate(v))
    med = data["median_rows_per_s"]
    return f"""## {name}

The cluster scenario's live `metrics` stream, {data['hours']} scenario hours in spans of
{data['span_s']:,} s a micro-batch, through Spark's `moirae_cluster` Python Data Source
(`speedup=max`, `availableNow`, Spark's `noop` sink) against the same generator called in pandas
for the same spans, in the same run (load average {data['load_avg_1m']}). Rounds alternate the
order. *Steady* leaves out each query's first micro-batch, whose time includes starting the
query's Python workers (paid once by a live query that runs for hours).

| round | method | rows | seconds | rows/s | batches | first batch s | steady rows/s |
|---|---|---|---|---|---|---|---|
{rows}

Median: Spark steady {med['spark_steady']:,.0f} rows/s, pandas {med['pandas']:,.0f} rows/s:
**{data['ratio']:.2f}x** (target >= {GOAL}x); counting each query's start, {data['ratio_with_start']:.2f}x.
Same rows delivered: {data['same_rows']}.
"""


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    methods = ["pandas", "spark", "spark_steady"]
    ax.bar(methods, [data["median_rows_per_s"][m] for m in methods], color=["tab:grey", "tab:blue", "tab:green"])
    ax.set_ylabel("rows/s (median)")
    ax.set_title(f"scenario source: {data['ratio']:.2f}x pandas")
    return fig



def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, data["benchmark"])

if __name__ == "__main__":
    raise SystemExit(main())
