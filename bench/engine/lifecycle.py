"""Lifecycle: monitors deployed and undeployed on a running engine (``moirae/deploy/lifecycle.py``).

One engine runs a *reference* monitor (Spark's rate source at ``--ref-rate`` rows/s, an
event-query over it, a Recall). Then, one after another, N monitors (20; 5 with
``--quick``) of the same shape, each on its own rate source, are deployed with
``Engine.deploy_monitor`` and, once their first micro-batch has run, undeployed with
``Engine.undeploy_monitor``. Measured in the same run:

- **deploy**: seconds from the deploy call to the monitor's first micro-batch (its event
  query's first progress report). Baseline: a bare Spark streaming query on the same
  kind of source (rate source into Spark's ``noop`` sink), started in the same run, to
  its first progress report.
- **undeploy**: seconds of each ``undeploy_monitor`` call (its queries stopped, its tasks
  cancelled, its operators and sources freed), after the monitor ran ``--dwell`` seconds
  past its first micro-batch (alerts raised, recall tasks open).
- **leaks**: Spark streaming queries, threads, PostgreSQL sessions of the engine and open
  recall tasks after the last undeploy against before the first measured cycle
  (``moirae.deploy.lifecycle.footprint`` and ``leaks``; one warm-up cycle first, since
  the engine opens some connections once, lazily, with its first monitor).
- **reference throughput**: rows per second the reference monitor's event-query
  processed, in windows of ``--window`` seconds, before the cycles (its noise: the
  spread of those windows), during them and after them.

Targets: each deploy reaches its first micro-batch within 10 s; each undeploy takes at
most 5 s; no leaks afterwards; the reference's median rows/s during and after lies
within the spread of its windows before.

Run: ``python -m bench lifecycle [--quick]`` (published as ``lifecycle_quick`` when quick).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.harness import exit_code, percentile, publish, spread_note, target, verdict

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/engine/lifecycle.py", "moirae/deploy", "moirae/engine", "moirae/ingest", "archive/drop.py")

DEPLOY_GOAL_S = 10.0
UNDEPLOY_GOAL_S = 5.0
TRIGGER = "500ms"


def monitor(name: str, rate: int, every: int):
    """(text, version, apply) of one monitor: a rate source, an event-query keeping
    every ``every``-th row, a Recall counting the history of its key."""
    text = f"name: {name}\nrate: {rate}\nevery: {every}\n"

    def apply(engine):
        from pyspark.sql import functions as F

        df = (engine.spark.readStream.format("rate").option("rowsPerSecond", rate).option("numPartitions", 1).load()
              .select(F.col("timestamp").alias("ts"), (F.col("value") % 5).cast("string").alias("k"),
                      F.col("value").alias("v")))
        engine.source(f"{name}_in", df, ts="ts", lateness="2 seconds")

        def detect(src):
            return (src.filter(F.col("v") % every == 0)
                    .with_column("eid", F.concat_ws(":", F.lit(name), F.col("v").cast("string"))))

        engine.event_query(name, detect, inputs=[f"{name}_in"])
        engine.recall(name, f"SELECT count(*) AS n FROM {name}_in h WHERE h.k = :k", name=f"{name}_norm",
                      feedback_period=None)

    return text, hashlib.sha256(text.encode()).hexdigest()[:16], apply


class Sampler:
    """Rows the reference event-query processed, per wall-clock window, from its
    progress reports (each counted once, by its batch id)."""

    def __init__(self, engine, name: str, window: float) -> None:
        self.engine, self.name, self.window = engine, name, window
        self.seen: set[int] = set()
        self.rows: list[tuple[float, int]] = []  # (wall time of the report, input rows)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            flow = self.engine.deploy.flows.get(self.name)
            q = flow.streaming if flow is not None else None
            for p in (q.recentProgress if q is not None else []):
                if p["batchId"] not in self.seen:
                    self.seen.add(p["batchId"])
                    self.rows.append((time.time(), int(p["numInputRows"])))

    def rates(self, start: float, end: float) -> list[float]:
        """Rows/s of each whole window between ``start`` and ``end`` (wall times)."""
        out = []
        t = start
        while t + self.window <= end:
            out.append(sum(n for at, n in self.rows if t <= at < t + self.window) / self.window)
            t += self.window
        return out

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)


def first_batch(engine, name: str, timeout: float = 120.0) -> float | None:
    """Wall seconds until ``name``'s event-query reports its first progress (None: timed out)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        flow = engine.deploy.flows.get(name)
        if flow is not None and flow.streaming is not None and flow.streaming.lastProgress is not None:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def bare_query_start(spark, tmp: Path, rate: int) -> float:
    """Seconds from starting a bare rate-source query (Spark's ``noop`` sink) to its first progress."""
    t0 = time.monotonic()
    q = (spark.readStream.format("rate").option("rowsPerSecond", rate).load().writeStream.format("noop")
         .option("checkpointLocation", str(tmp / f"bare-{time.time_ns()}")).trigger(processingTime="500 milliseconds").start())
    try:
        while q.lastProgress is None and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        return time.monotonic() - t0
    finally:
        q.stop()


def cycle(engine, name: str, rate: int, dwell: float) -> dict:
    """Deploy monitor ``name``, wait for its first micro-batch, let it run ``dwell``
    seconds (it raises alerts and starts recall tasks), undeploy it."""
    text, version, apply = monitor(name, rate, 10)
    t0 = time.monotonic()
    out = engine.deploy_monitor(name, version, text, apply)
    call_s = time.monotonic() - t0
    waited = first_batch(engine, name)
    deploy_s = None if waited is None else call_s + waited
    time.sleep(dwell)
    gone = engine.undeploy_monitor(name)
    return {"name": name, "result": out["result"], "deploy_call_s": round(call_s, 3),
            "first_batch_s": None if deploy_s is None else round(deploy_s, 3), "undeploy_s": gone["seconds"],
            "undeploy_phases": gone["phases"], "cancelled_tasks": sum(gone["cancelled"].values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 monitors instead of 20, shorter windows")
    ap.add_argument("--monitors", type=int, default=None)
    ap.add_argument("--ref-rate", type=int, default=200, help="rows/s of the reference monitor's source")
    ap.add_argument("--rate", type=int, default=50, help="rows/s of each deployed monitor's source")
    ap.add_argument("--window", type=float, default=None, help="seconds of each throughput window")
    ap.add_argument("--dwell", type=float, default=None, help="seconds each monitor runs before its undeploy")
    args = ap.parse_args(argv)
    from bench.engine.engine_e2e import Bench
    from moirae.deploy.lifecycle import leaks

    n = args.monitors or (5 if args.quick else 20)
    window = args.window or (4.0 if args.quick else 5.0)
    settle = 8 * window if not args.quick else 5 * window
    dwell = args.dwell if args.dwell is not None else (3.0 if args.quick else 5.0)
    name = "lifecycle_quick" if args.quick else "lifecycle"
    tmp = Path(tempfile.mkdtemp(prefix="moirae-bench-lifecycle-"))
    b = Bench(tmp)
    engine = b.engine("lifecycle", spark={"trigger": TRIGGER}, archive={"chunk_span": "10m", "chunk_target_rows": 0},
                      recall={"feedback_period": 100})
    data: dict = {"quick": args.quick, "monitors": n, "ref_rate": args.ref_rate, "rate": args.rate,
                  "window_s": window, "trigger": TRIGGER, "dwell_s": dwell}
    sampler = None
    try:
        engine.start()
        text, version, apply = monitor("ref", args.ref_rate, 100)
        engine.deploy_monitor("ref", version, text, apply)
        first_batch(engine, "ref")
        sampler = Sampler(engine, "ref", window)
        warm = cycle(engine, "warmup", args.rate, dwell)  # the engine's lazily made connections and workers
        print(f"warm-up cycle: {warm}", flush=True)
        bare = [bare_query_start(engine.spark, tmp, args.rate) for _ in range(3)]
        time.sleep(window)  # the warm-up's last batches out of the reference's windows
        t_before = time.time()
        time.sleep(settle)
        before = engine.footprint()
        t_during = time.time()
        cycles = []
        for i in range(n):
            c = cycle(engine, f"m{i:02d}", args.rate, dwell)
            cycles.append(c)
            print(f"cycle {i}: {c}", flush=True)
        t_after = time.time()
        after = engine.footprint()
        # py4j keeps the Python thread of a JVM thread that called Python (a stopped query's)
        # until the JVM collects that thread's connection: counted again after a JVM GC
        engine.spark._jvm.java.lang.System.gc()
        time.sleep(2.0)
        py4j_after_gc = sum(1 for t in engine.footprint(samples=1)["threads"] if t.endswith("[py4j.clientserver]"))
        time.sleep(settle)
        t_end = time.time()
        sampler.stop()
        rates = {"before": sampler.rates(t_before, t_during), "during": sampler.rates(t_during, t_after),
                 "after": sampler.rates(t_after, t_end)}
        leaked = leaks(before, after)
        data.update({
            "cycles": cycles, "warmup": warm, "bare_first_batch_s": [round(x, 3) for x in bare],
            "ref_rows_per_s": {k: [round(x, 2) for x in v] for k, v in rates.items()},
            "ref_median": {k: round(statistics.median(v), 2) if v else None for k, v in rates.items()},
            "leaks": leaked,
            "footprint": {k: {"spark_queries": v["spark_queries"], "pg_sessions": v["pg_sessions"],
                              "threads": len(v["threads"]), "open_tasks": len(v["open_tasks"])}
                          for k, v in (("before", before), ("after", after))},
            "threads_before": before["threads"], "threads_after": after["threads"], "py4j_after_gc": py4j_after_gc,
            "python_workers": {"before": before["python_workers"], "after": after["python_workers"]},
            "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()})
    finally:
        if sampler is not None:
            sampler.stop()
        engine.close()
        b.drop_schemas()
    ts = targets(data)
    publish(name, data, markdown(data, name), figure(data), targets=ts)
    print(markdown(data, name))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    deploys = [c["first_batch_s"] if c["first_batch_s"] is not None else float("inf") for c in data["cycles"]]
    undeploys = [c["undeploy_s"] for c in data["cycles"]]
    bare = statistics.median(data["bare_first_batch_s"])
    before = data["ref_rows_per_s"]["before"]
    lo, hi = (min(before), max(before)) if before else (0.0, 0.0)
    med = data["ref_median"]
    within = [m is not None and lo <= m <= hi for m in (med["during"], med["after"])]
    leaked = data["leaks"]
    return [
        target(f"lifecycle: each of {data['monitors']} deploys reaches its first micro-batch",
               f"<= {DEPLOY_GOAL_S:g} s", f"median {percentile(deploys, 50):.2f} s, max {max(deploys):.2f} s "
               f"(a bare Spark query: {bare:.2f} s)", verdict(deploys, DEPLOY_GOAL_S, at_least=False),
               note=spread_note(deploys, DEPLOY_GOAL_S)),
        target(f"lifecycle: each of {data['monitors']} undeploys", f"<= {UNDEPLOY_GOAL_S:g} s",
               f"median {percentile(undeploys, 50):.2f} s, max {max(undeploys):.2f} s",
               verdict(undeploys, UNDEPLOY_GOAL_S, at_least=False), note=spread_note(undeploys, UNDEPLOY_GOAL_S)),
        target("lifecycle: leaked Spark queries, threads, PostgreSQL sessions, open tasks afterwards", "none",
               "none" if not leaked else ", ".join(f"{k}: {v}" for k, v in leaked.items())[:300], not leaked),
        target("lifecycle: the reference monitor's rows/s during and after, within its noise before",
               f"within {lo:.1f}-{hi:.1f} rows/s", f"during {med['during']}, after {med['after']} "
               f"(before {med['before']})", all(within) if before else None,
               note="" if before else "no windows before"),
    ]


def markdown(data: dict, name: str) -> str:
    rows = "\n".join(f"| {c['name']} | {c['first_batch_s']} | {c['deploy_call_s']} | {c['undeploy_s']} | "
                     f"{c['undeploy_phases'].get('stop_query')} | {c['cancelled_tasks']} |" for c in data["cycles"])
    med, r = data["ref_median"], data["ref_rows_per_s"]
    lk = data["leaks"]
    fp = data["footprint"]
    return f"""## {name}

{data['monitors']} monitors deployed and undeployed one after another on a running engine
(`bench/engine/lifecycle.py`{' --quick' if data['quick'] else ''}; trigger {data['trigger']}), each a rate
source at {data['rate']} rows/s, an event-query (an alert every 10th row) and a Recall, running
{data['dwell_s']:g} s after its first micro-batch before it is undeployed, beside a reference monitor at
{data['ref_rate']} rows/s that runs throughout; {data['cpus']} CPUs, load average
{data['load_avg_1m']} at the end. One warm-up cycle precedes the measured ones. *First batch*: from
the deploy call to the monitor's first micro-batch; a bare Spark rate-source query started in
the same run took {', '.join(f'{x:.2f}' for x in data['bare_first_batch_s'])} s to its first.
*Stop*: of the undeploy, the seconds its event-query took to stop.

| monitor | first batch s | deploy call s | undeploy s | stop s | tasks cancelled |
|---|---|---|---|---|---|
{rows}

Reference monitor, rows/s per {data['window_s']:g} s window: before {r['before']} (median
{med['before']}), during {r['during']} (median {med['during']}), after {r['after']} (median
{med['after']}).

Leaks after the last undeploy: {'none' if not lk else lk}. Footprint before: {fp['before']};
after: {fp['after']}. Threads are counted by the module running them; py4j's callback
threads (Spark calling Python: each `foreachBatch` query's calls) are Spark's own and not
counted as leaks: {py4j(data, 'threads_before')} before, {py4j(data, 'threads_after')} after,
{data.get('py4j_after_gc', '?')} after a JVM garbage collection. Spark's Python workers (each holds
one archive connection): {data.get('python_workers', {}).get('before', '?')} before,
{data.get('python_workers', {}).get('after', '?')} after.
"""


def py4j(data: dict, key: str) -> int:
    return sum(1 for t in data.get(key, ()) if t.endswith("[py4j.clientserver]"))


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    xs = range(len(data["cycles"]))
    a1.plot(xs, [c["first_batch_s"] for c in data["cycles"]], "o-", label="deploy: first micro-batch")
    a1.plot(xs, [c["undeploy_s"] for c in data["cycles"]], "s-", label="undeploy")
    a1.axhline(DEPLOY_GOAL_S, color="tab:blue", ls=":", lw=1)
    a1.axhline(UNDEPLOY_GOAL_S, color="tab:orange", ls=":", lw=1)
    a1.set_xlabel("monitor")
    a1.set_ylabel("seconds")
    a1.legend(fontsize=8)
    r = data["ref_rows_per_s"]
    pos = 0
    for phase, color in (("before", "tab:grey"), ("during", "tab:red"), ("after", "tab:green")):
        a2.plot(range(pos, pos + len(r[phase])), r[phase], "o-", color=color, label=phase)
        pos += len(r[phase])
    a2.set_xlabel(f"{data['window_s']:g} s window")
    a2.set_ylabel("reference rows/s")
    a2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, data["benchmark"])


if __name__ == "__main__":
    raise SystemExit(main())
