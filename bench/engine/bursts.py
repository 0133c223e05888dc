"""Bursts at capacity: does the full engine keep its pace when offered more than it can
take, once each micro-batch is bounded by its source's admission control?

The setup is :mod:`bench.engine.engine_jvm`'s: Spark's JVM ``rate`` source shaped like
the metrics stream (``ts``, ``sid = value % 1000``, ``bw``), the 5 s tumbling average
per ``sid`` with a filter, a context-query over ``users``, one Recall and one Similarity
Recall (the ``full`` configuration), ``local[2]``, each run ``--seconds`` (60) long.

Runs, each in the same run of this benchmark, interleaved over ``--rounds``:

- ``sustainable``: the full engine offered ``S`` rows/s (``--rate``; default 0.8 x the
  last published full-engine capacity of ``engine_jvm``);
- ``burst_bounded``: offered ``4 S``, each micro-batch bounded to ``S x trigger`` rows
  (the bound a user gives the source: Spark's ``rate-micro-batch`` ``rowsPerBatch``,
  with event time following the offered rate, ``ts = value / 4S``). At 4 S the backlog
  never runs dry, so a bounded rate source delivers exactly ``rowsPerBatch`` rows each
  batch: the same rows, in the same order, with the same times, as this source;
- ``burst_unbounded`` (not with ``--quick``): offered ``4 S`` through the plain ``rate``
  source, nothing bounding a batch: the spiral (each batch takes the whole backlog);
- ``archive``: archive only, offered ``4 S`` (the ceiling of the sink on the same rows).

Rows processed = input rows of the batches each query completed within the run's
``--seconds``, counted from the end of its first batch with rows (start-up, the same for
every run, is left out); for the engine, the fewest over its queries that read ``metrics`` (the
archive's and the event-query's). Targets: ``burst_bounded`` >= 0.8 x ``sustainable``
and >= 0.5 x ``archive``, in every round.

Run: ``python -m bench bursts [--quick] [--rate ROWS_PER_S] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil

from bench.engine.engine_e2e import STOP_GRACE_S, Bench, pct
from bench.engine.engine_jvm import HOT, KEYS, USERS_SQL, overload, rate_users
from bench.harness import RESULTS, exit_code, publish, run_orders, target, verdict
from moirae.runtime.graceful_stop import stop_between_batches

MEASURES = ("bench/engine/bursts.py", "bench/engine/engine_jvm.py", "moirae", "archive", "recall", "similarity",
            "ananke")
TRIGGER_S = 2.0
RUNS = ("sustainable", "burst_bounded", "burst_unbounded", "archive")
OVER = 4  # the burst: offered rate over the sustainable one
START_TIMEOUT_S = 300.0


def metrics_df(spark, rate: int, base_us: int, rows_per_batch: int | None = None):
    """The metrics stream offered at ``rate`` rows/s: Spark's ``rate`` source, or with
    ``rows_per_batch`` the backlogged, bounded form of it (``rate-micro-batch``; module doc)."""
    from pyspark.sql import functions as F

    if rows_per_batch is None:
        df = spark.readStream.format("rate").option("rowsPerSecond", int(rate)).option("numPartitions", 2).load()
    else:
        df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", int(rows_per_batch))
              .option("numPartitions", 2).load())
    sid = F.col("value") % KEYS
    bw = (F.abs(F.xxhash64("value")) % 100) + F.when(sid < HOT, 1000).otherwise(0)
    ts = F.timestamp_micros(F.lit(int(base_us)) + F.expr(f"value * 1000000 div {int(rate)}"))
    return df.select(ts.alias("ts"), sid.cast("bigint").alias("sid"), bw.cast("double").alias("bw"))


def start_engine(b: Bench, run: str, rate: int, bound: int):
    from datetime import timedelta

    full = run != "archive"
    e = b.engine(run, spark={"trigger": f"{int(TRIGGER_S * 1000)}ms"}, ananke={"enabled": full})
    base_us = time.time_ns() // 1000
    offered = rate if run == "sustainable" else OVER * rate
    per_batch = bound if run == "burst_bounded" else None
    e.source("metrics", metrics_df(e.spark, offered, base_us, per_batch), ts="ts", lateness="2 seconds",
             indexes=[("sid",)])
    e.source("users", rate_users(e.spark, base_us), ts="ts", lateness="2 seconds", indexes=[("sid",)])
    if full:
        e.event_query("overload", overload, inputs=["metrics"])
        e.recall("overload", "SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n FROM metrics h "
                 "WHERE h.sid = :sid GROUP BY h.sid", name="norm", period=timedelta(minutes=10), time_column="h.ts")
        e.context_query("overload", USERS_SQL, name="users", window="10s")
        e.similarity_recall("overload", k=3, name="similar")
    e.start()
    return e, offered


def metrics_queries(e) -> list:
    """The engine's streaming queries that read ``metrics``: the source's and the event-query's."""
    src = e.sources.by_name["metrics"].query
    return [q for q in [src, *(f.streaming for f in e.deploy.flows.values())] if q is not None]


def one_run(b: Bench, run: str, rate: int, seconds: float) -> dict:
    bound = int(rate * TRIGGER_S)
    e, offered = start_engine(b, run, rate, bound)
    try:
        qs = metrics_queries(e)

        def check() -> None:
            for q in qs:
                if q.exception() is not None:
                    raise RuntimeError(f"{run}: query {q.name} failed: {q.exception()}")

        # the clock starts once every query has completed a batch with rows: start-up (JVM
        # planning, Python workers, the first empty batch) is not what a burst measures
        started = time.monotonic()
        while not all(any(p.get("numInputRows") for p in q.recentProgress) for q in qs):
            check()
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"{run}: no batch with rows within {START_TIMEOUT_S} s")
            time.sleep(0.2)
        first = {q.id: max(p["batchId"] for p in q.recentProgress) for q in qs}
        t0 = time.monotonic()
        while time.monotonic() < t0 + seconds:
            check()
            time.sleep(0.5)
        per_query = {}
        for q in qs:
            ps = [p for p in q.recentProgress if p.get("numInputRows") is not None and p["batchId"] > first[q.id]]
            dur = [p["durationMs"].get("triggerExecution", 0) for p in ps]
            rows = [int(p["numInputRows"]) for p in ps]
            per_query[q.name or str(q.id)] = {
                "rows": sum(rows), "batches": len(ps), "max_batch_rows": max(rows, default=0),
                "median_ms": pct(dur, 50), "last_ms": dur[-1] if dur else None,
                "ms_per_1k_rows": round(sum(dur) / max(1, sum(rows)) * 1000, 3) if rows else None}
    finally:
        e.close()
        for q in qs:
            if q.isActive:
                stop_between_batches(q, STOP_GRACE_S)
        b.drop_schemas()
    processed = min(x["rows"] for x in per_query.values())
    print(f"{run:>16} offered {offered:>9,} rows/s (bound {bound if run == 'burst_bounded' else '-'}): "
          f"{processed:,} rows in {seconds:.0f} s; " + "; ".join(
              f"{n}: {x['batches']} batches, max {x['max_batch_rows']:,} rows, median {x['median_ms']} ms"
              for n, x in per_query.items()), flush=True)
    return {"run": run, "offered": offered, "bound": bound if run == "burst_bounded" else None,
            "processed": processed, "queries": per_query}


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b > 0 else None  # a baseline that processed nothing in the span: no ratio


def ratios(rounds: list[dict]) -> dict:
    """Per round: bounded burst over sustainable and over archive-only (None where the
    baseline completed no batch in the span).

    >>> ratios([{"sustainable": {"processed": 100}, "burst_bounded": {"processed": 90},
    ...          "archive": {"processed": 0}}])
    {'over_sustainable': [0.9], 'over_archive': [None]}
    """
    return {"over_sustainable": [_ratio(r["burst_bounded"]["processed"], r["sustainable"]["processed"])
                                 for r in rounds],
            "over_archive": [_ratio(r["burst_bounded"]["processed"], r["archive"]["processed"]) for r in rounds]}


def targets(data: dict) -> list[dict]:
    """Bounded burst >= 0.8x sustainable and >= 0.5x archive-only, in every round."""
    r = data["ratios"]

    def one(what: str, xs: list, goal: float) -> dict:
        shown = ", ".join("-" if x is None else f"{x:.2f}" for x in xs)
        if None in xs:  # a baseline completed no batch within the span: nothing to compare
            return target(what, f">= {goal}x", shown, None, "a baseline completed no batch within the run")
        return target(what, f">= {goal}x", shown, verdict(xs, goal, exact=len(xs) == 1))

    return [one("bursts: full engine at 4x its sustainable rate, batches bounded, rows in the run vs. at "
                "the sustainable rate", r["over_sustainable"], 0.8),
            one("bursts: the same vs. archive-only offered 4x", r["over_archive"], 0.5)]


def markdown(data: dict) -> str:
    lines = [f"## Bursts at capacity (`bench/engine/bursts.py`{' --quick' if data['quick'] else ''})", "",
             f"Spark's JVM rate source (ts, sid = value % 1000, bw), 5 s tumbling average per sid with a filter, "
             f"one Recall and one Similarity Recall, `local[2]`, trigger {TRIGGER_S:g} s, {data['seconds']:g} s per "
             f"run; sustainable rate S = {data['rate']:,} rows/s, burst = {OVER} S; the bounded burst's source "
             f"admits S x trigger = {int(data['rate'] * TRIGGER_S):,} rows per micro-batch. Load average at the "
             f"start {data['load_avg']}.", "",
             "| round | run | offered rows/s | rows processed | batches (metrics queries) | largest batch | "
             "median batch ms | ms per 1k rows |", "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(data["rounds"]):
        for name in RUNS:
            x = r.get(name)
            if x is None:
                continue
            q = list(x["queries"].values())
            lines.append(f"| {i + 1} | {name} | {x['offered']:,} | {x['processed']:,} | "
                         f"{'/'.join(str(v['batches']) for v in q)} | {max(v['max_batch_rows'] for v in q):,} | "
                         f"{'/'.join(str(v['median_ms']) for v in q)} | "
                         f"{'/'.join(str(v['ms_per_1k_rows']) for v in q)} |")
    r = data["ratios"]
    lines += ["", f"Bounded burst / sustainable by round: {', '.join(map(str, r['over_sustainable']))} "
                  f"(target >= 0.8); bounded burst / archive-only: {', '.join(map(str, r['over_archive']))} "
                  "(target >= 0.5)."]
    for t in data["targets"]:
        lines.append(f"- {t['what']}: {t['measured']} ({t['target']}): "
                     f"**{ {True: 'met', False: 'missed', None: 'unresolved'}[t['met']] }**.")
    return "\n".join(lines)


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [n for n in RUNS if any(n in r for r in data["rounds"])]
    for i, r in enumerate(data["rounds"]):
        ax.bar([j + i * 0.8 / len(data["rounds"]) for j in range(len(names))],
               [r[n]["processed"] / 1e6 if n in r else 0 for n in names], width=0.8 / len(data["rounds"]),
               label=f"round {i + 1}")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel(f"million rows in {data['seconds']:g} s")
    ax.legend()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 20 s runs, no unbounded burst")
    ap.add_argument("--rate", type=int, default=None,
                    help="the sustainable rate S (default 0.8 x engine_jvm's last full-engine capacity)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per run (default 60; quick 20)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 2; quick 1)")
    args = ap.parse_args(argv)
    rate = args.rate
    if rate is None:
        prev = json.loads((RESULTS / "engine_jvm.json").read_text())
        rate = int(0.8 * prev["capacity"]["full"]["sustained_rows_per_s"])
    seconds = args.seconds or (20.0 if args.quick else 60.0)
    rounds = args.rounds or (1 if args.quick else 2)
    runs = [r for r in RUNS if not (args.quick and r == "burst_unbounded")]
    from moirae.runtime.spark import spark_session

    spark_session()
    data: dict = {"quick": args.quick, "rate": rate, "seconds": seconds, "trigger_s": TRIGGER_S,
                  "load_avg": [round(x, 2) for x in psutil.getloadavg()], "rounds": []}
    with tempfile.TemporaryDirectory(prefix="moirae-bursts-") as d:
        b = Bench(Path(d))
        try:
            one_run(b, "sustainable", rate, 5.0)  # JIT, Python workers: discarded
            for order in run_orders(runs, rounds):
                data["rounds"].append({name: one_run(b, name, rate, seconds) for name in order})
        finally:
            b.drop_schemas()
    data["ratios"] = ratios(data["rounds"])
    data["targets"] = targets(data)
    fig = None
    try:
        fig = figure(data)
    except Exception as exc:  # the figure is optional; the figures are in the JSON
        print(f"no figure: {exc}")
    publish("bursts_quick" if args.quick else "bursts", data, markdown(data), fig, targets=data["targets"])
    print(json.dumps(data["ratios"]), flush=True)
    return exit_code(data["targets"])


if __name__ == "__main__":
    raise SystemExit(main())
