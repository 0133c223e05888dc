"""Provenance overhead, provenance latency and ANK-1 state (Ananke paper A 6.1-6.2).

For Linear Road and Smart Grid (``ananke.examples``), each configuration replays the same
generated workload (the same JSON files) through the same queries:

- ``np``: no provenance (the wrappers with provenance disabled); alerts collected to the driver;
- ``backward``: backward provenance carried to the sinks (GeneaLog-style), collected to the driver;
- ``ank1``: backward provenance + ANK-1 on the driver (Algorithm 1), fed by the same one
  collect of the batch that delivers the alerts;
- ``ankn``: backward provenance + ANK-N from Spark operators (A 5.2).

Throughput = input rows / wall time until every sink's query has drained the input
(``availableNow``). Each configuration runs in JVMs of its own, as a user runs one
engine with one configuration: ``--forks`` times (4 by default) a fresh process with its
own Spark session runs ``--warm`` discarded runs (3) and then ``--runs`` measured ones
(2), the forks of the configurations in the orders of :func:`bench.harness.run_orders`
(each configuration in each position, and right after each other one, equally often).
Each configuration runs in processes of its own: in one shared JVM a run depends on the
one before it (the JIT recompiling what another configuration's types deoptimized). The median run is reported with a 95 % confidence interval; the
ANK-1 / backward ratio's interval comes from the ratios of the two configurations'
mean throughput in the forks run in the same position of the design (Student's t). The
full size has >= 200,000 source rows per workload, in micro-batches of about 10,000
rows. Provenance latency is in multiples of U, per item kind (A fig. 15), from the last
measured run. ANK-1's state |T| is sampled each time the horizon advances, next to the
number of input tuples inside the alive window [W - U, W + lateness].

With ``--until-resolved MAX``, whole cycles of forks are added until every interval lies
on one side of its target (ANK-1 >= 0.95x, ANK-N >= 0.9x of backward) or MAX forks ran.

Run: ``python -m bench provenance [--quick] [--forks N] [--warm N] [--runs N] [--until-resolved MAX] [--workloads NAME...]``;
with ``--workloads`` the other workloads' figures are kept from the last full-size result,
each with its own date and design.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from ananke.ank1 import Ank1
from ananke.ankn import AnkNSparkSink
from ananke.examples import linear_road, smart_grid, workload
from ananke.ids import EPOCH, to_timedelta
from ananke.items import ListSink
from ananke.query import ProvQuery
from ananke.spark_adapter import Ank1SparkSink
from bench.harness import RESULTS, ROOT, commit, exit_code, publish, run_orders, target

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/provenance/provenance.py", "ananke")

CONFIGS = ("np", "backward", "ank1", "ankn")


def linear_road_workload(quick: bool) -> dict:
    rows = linear_road.generate(vehicles=60 if quick else 500, minutes=14 if quick else 205,
                                breakdowns=4 if quick else 12, accidents=2 if quick else 6)
    end = rows[-1]["ts"]
    rows += workload.flush_rows({"vid": -1, "speed": 0.0, "xway": 9, "lane": 1, "dir": 0, "seg": 0, "pos": -1},
                                [end + timedelta(minutes=10), end + timedelta(minutes=20)])
    return dict(module=linear_road, rows=rows, files=4 if quick else -(-len(rows) // 10_000),
                lateness="30 seconds", kwargs={})


def smart_grid_workload(quick: bool) -> dict:
    rows = smart_grid.generate(meters=20 if quick else 600, days=4 if quick else 14, blackouts=3 if quick else 12,
                               anomalies=4 if quick else 16)
    end = rows[-1]["ts"]
    rows += workload.flush_rows({"meter": -1, "value": 5.0}, [end + timedelta(days=3), end + timedelta(days=5)])
    return dict(module=smart_grid, rows=rows, files=4 if quick else -(-len(rows) // 10_000),
                lateness="1 hour", kwargs={"min_meters": 0})


#: each workload's builder: a fork generates only the one it runs
WORKLOADS = {"linear_road": linear_road_workload, "smart_grid": smart_grid_workload}


def run_once(spark, wl: dict, directory: str, config: str) -> dict:
    mod = wl["module"]
    q = ProvQuery(enabled=config != "np")
    stream = spark.readStream.schema(mod.SCHEMA).option("maxFilesPerTrigger", 1).json(directory)
    sinks = mod.build(q, stream, lateness=wl["lateness"], **wl["kwargs"])
    alerts = []

    def collect(batch_df, _batch_id):  # the sink's consumer: the batch's rows on the driver
        alerts.extend(batch_df.toArrow().to_pylist())

    def consume(frame, _batch_id):  # the same rows, from ANK-1's own collect (one Spark job)
        alerts.extend(frame.to_dict("records"))

    out, logic, samples = ListSink(), None, []
    if config == "ank1":
        logic = Ank1.from_query(q).build(out, on_horizon=lambda h: samples.append((h + q.U, logic.state_size())))
        runners = [Ank1SparkSink(s, logic, deliver_frame=consume) for s in sinks.values()]
    elif config == "ankn":
        runners = [AnkNSparkSink(list(sinks.values()), out)]
    else:
        runners = None
    t0 = time.perf_counter()
    if runners is None:
        queries = [s.df.writeStream.foreachBatch(collect).trigger(availableNow=True).start() for s in sinks.values()]
    else:
        queries = [r.start(trigger={"availableNow": True}) for r in runners]
    for qq in queries:
        qq.awaitTermination()
    elapsed = time.perf_counter() - t0
    if config == "ank1":
        for r in runners:
            r.poll()
    return {"elapsed_s": elapsed, "rows_per_s": len(wl["rows"]) / elapsed, "alerts": len(alerts),
            "items": out.items, "U": q.U, "U_K": q.graph.u_values(), "samples": samples, "logic": logic}


def latency_in_u(items, U: timedelta) -> dict:
    """A 3's provenance latency per kind, in multiples of U: vertices τ_V - t.τ, edges
    τ_E - max(τ_V of both ends), labels τ_L - τ_V. Items ANK-1 emitted before every sink had
    a watermark are stamped with the epoch (W = -inf in Algorithm 1): they are left out of
    the statistics and counted under ``before_first_watermark``."""
    early = sum(1 for i in items if i.ts == EPOCH)
    vts = {(i.kind, i.id): i.ts for i in items if i.kind in ("source", "sink")}
    items = [i for i in items if i.ts != EPOCH]
    lat: dict[str, list[float]] = {"SINK": [], "SOURCE": [], "EDGE": [], "SINK-L": [], "SOURCE-L": []}
    for i in items:
        if i.kind in ("source", "sink"):
            lat[i.kind.upper()].append((i.ts - i.tuple_ts) / U)
        elif i.kind == "edge":
            ends = [vts.get(("source", i.source_id)), vts.get(("sink", i.sink_id))]
            lat["EDGE"].append((i.ts - max(e for e in ends if e is not None)) / U)
        elif vts.get((i.vertex_kind, i.vertex_id), EPOCH) != EPOCH:  # label of a vertex stamped after W existed
            lat[f"{i.vertex_kind.upper()}-L"].append((i.ts - vts[(i.vertex_kind, i.vertex_id)]) / U)
    out = {k: {"mean": round(statistics.fmean(v), 3), "max": round(max(v), 3), "n": len(v)} if v else None
           for k, v in lat.items()}
    out["before_first_watermark"] = early
    return out


_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def ci95(values: list[float]) -> list[float] | None:
    """Student's t 95 % interval of the mean, [low, high]; None with fewer than 2 values."""
    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = _T95.get(len(values) - 1, 1.96) * sd / len(values) ** 0.5
    return [round(mean - half, 4), round(mean + half, 4)]


def fork_main(name: str, config: str, directory: str, quick: bool, warm: int, runs: int) -> dict:
    """One fork: ``warm`` discarded and ``runs`` measured runs of ``config`` over the files
    in ``directory``, in this process's own Spark session; what the parent needs of them,
    JSON-ready (the graph, latency and state from the last run)."""
    from ananke.items import graph_key
    from moirae.runtime.spark import spark_session

    spark = spark_session(app_name=f"bench-provenance-{name}-{config}")
    wl = WORKLOADS[name](quick)
    for _ in range(warm):
        run_once(spark, wl, directory, config)
    measured = [run_once(spark, wl, directory, config) for _ in range(runs)]
    last = measured[-1]
    out: dict = {"rows_per_s": [r["rows_per_s"] for r in measured], "alerts": last["alerts"],
                 "U_s": last["U"].total_seconds(), "U_K_s": {k: v.total_seconds() for k, v in last["U_K"].items()}}
    if config in ("ank1", "ankn"):
        out["graph_keys"] = sorted(repr(graph_key(i)) for i in last["items"])
        out["latency_in_U"] = latency_in_u(last["items"], last["U"])
    if config == "ank1":
        out["samples"] = [[w.isoformat(), n] for w, n in last["samples"]]
        out["max_state"], out["final_state"] = last["logic"].stats.max_state, last["logic"].state_size()
    return out


def fork(name: str, config: str, directory: str, quick: bool, warm: int, runs: int) -> dict:
    """:func:`fork_main` in a fresh Python process, so with a JVM of its own."""
    cmd = [sys.executable, "-m", "bench.provenance.provenance", "--fork", name, config, directory,
           "--warm", str(warm), "--runs", str(runs), *(["--quick"] if quick else [])]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise RuntimeError(f"provenance fork {name} {config} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    ap.add_argument("--forks", type=int, default=None, help="JVMs per configuration (default 4, quick 1)")
    ap.add_argument("--warm", type=int, default=None, help="discarded runs in each JVM (default 3, quick 1)")
    ap.add_argument("--runs", type=int, default=None, help="measured runs in each JVM (default 2, quick 1)")
    ap.add_argument("--until-resolved", type=int, default=None, metavar="MAX_FORKS",
                    help="after the --forks, add whole cycles of forks (4 more per configuration, in balanced "
                         "orders) until every 95 %% interval (ANK-1 vs 0.95, ANK-N vs 0.9) lies on one side of "
                         "its target, or MAX_FORKS per configuration ran")
    ap.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=None,
                    help="run only these workloads; the others' figures are kept from the last full-size "
                         "result, each with the date and design it was measured with (default: all)")
    ap.add_argument("--fork", nargs=3, metavar=("WORKLOAD", "CONFIG", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    forks = args.forks or (1 if args.quick else 4)
    warm = args.warm if args.warm is not None else (1 if args.quick else 3)
    runs = args.runs or (1 if args.quick else 2)
    if args.fork:
        print(json.dumps(fork_main(*args.fork, args.quick, warm, runs)), flush=True)
        raise SystemExit(0)

    results: dict = {"quick": args.quick, "forks": forks, "warm": warm, "runs": runs, "workloads": {}}
    chosen = args.workloads or list(WORKLOADS)
    for name, build in WORKLOADS.items():
        if name not in chosen:
            continue
        wl = build(args.quick)
        load_before = os.getloadavg()
        directory = tempfile.mkdtemp(prefix=f"prov-{name}-")
        try:
            workload.write_files(wl["rows"], directory, -(-len(wl["rows"]) // wl["files"]))
            outs: dict[str, list[dict]] = {c: [] for c in CONFIGS}
            done = 0
            while True:
                orders = run_orders(CONFIGS, done + forks)[done:]
                for f, order in enumerate(orders, start=done):
                    for config in order:
                        outs[config].append(fork(name, config, directory, args.quick, warm, runs))
                        print(f"{name} fork {f} {config}: "
                              f"{', '.join(f'{x:.0f}' for x in outs[config][-1]['rows_per_s'])} rows/s", flush=True)
                done += len(orders)
                if not args.until_resolved or done >= args.until_resolved or resolved(outs):
                    break
                forks = min(len(CONFIGS), args.until_resolved - done)  # one more cycle of the design
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        results["workloads"][name] = {**summarize(wl, outs), "forks": len(outs["ank1"]), "warm": warm, "runs": runs,
                                      "measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                                      "commit": commit(MEASURES),
                                      # the machine is shared: its 1-minute load average before and after
                                      "load_avg_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
    if not args.quick:
        merged = {**kept_workloads(RESULTS / "provenance.json", chosen), **results["workloads"]}
        results["workloads"] = {n: merged[n] for n in WORKLOADS if n in merged}  # in WORKLOADS' order
    publish("provenance_quick" if args.quick else "provenance", results, _markdown(results), _figure(results),
            targets=targets(results))
    return results


def kept_workloads(path, chosen: list[str]) -> dict:
    """The figures of the workloads not in ``chosen`` from the last result at ``path``,
    each stamped with the design, date and commit it was measured with (a result written
    before workloads carried their own takes them from the result).

    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.json"
    >>> _ = f.write_text(json.dumps({"measured_at": "2026-11-27 11:46 UTC", "quick": False, "forks": 4, "warm": 3,
    ...                              "runs": 2, "workloads": {"a": {"x": 1}, "b": {"x": 2}}}))
    >>> kept_workloads(f, ["a"])
    {'b': {'x': 2, 'forks': 4, 'warm': 3, 'runs': 2, 'measured_at': '2026-11-27 11:46 UTC', 'commit': None}}
    >>> kept_workloads(f.parent / "none.json", ["a"])
    {}
    """
    if not path.exists():
        return {}
    old = json.loads(path.read_text())
    if old.get("quick"):
        return {}
    keys = ("forks", "warm", "runs", "measured_at", "commit")
    return {n: {**w, **{k: w.get(k, old.get(k)) for k in keys}}
            for n, w in old.get("workloads", {}).items() if n not in chosen}


GOALS = {"ank1": 0.95, "ankn": 0.9}  # vs backward provenance only (A 6.1; ANK-N: issue's restated goal)


def resolved(outs: dict[str, list[dict]]) -> bool:
    """Whether each variant's 95 % interval of its per-fork ratio to backward lies on one
    side of its goal (:data:`GOALS`).

    >>> f = lambda *xs: [{"rows_per_s": [x]} for x in xs]
    >>> resolved({"backward": f(10, 10, 10), "ank1": f(9.9, 10.0, 10.1), "ankn": f(7, 7.1, 6.9)})
    True
    >>> resolved({"backward": f(10, 10), "ank1": f(8, 11), "ankn": f(7, 7.1)})
    False
    """
    back = [statistics.fmean(o["rows_per_s"]) for o in outs["backward"]]
    for variant, goal in GOALS.items():
        ci = ci95([statistics.fmean(o["rows_per_s"]) / b for o, b in zip(outs[variant], back, strict=True)])
        if ci is None or ci[0] < goal <= ci[1]:
            return False
    return True


def summarize(wl: dict, outs: dict[str, list[dict]]) -> dict:
    """One workload's figures from each configuration's forks (:func:`fork_main` outputs,
    in the order they ran in the design)."""
    all_runs = {c: [x for o in outs[c] for x in o["rows_per_s"]] for c in CONFIGS}
    tput = {c: statistics.median(v) for c, v in all_runs.items()}
    ank1, ankn = outs["ank1"][-1], outs["ankn"][-1]
    U = timedelta(seconds=ank1["U_s"])
    rows_ts = sorted(r["ts"] for r in wl["rows"])
    lateness = to_timedelta(wl["lateness"])
    state = []
    for w_iso, n in ank1["samples"]:
        w = datetime.fromisoformat(w_iso)
        state.append({"W": w_iso, "state": n, "alive_window_inputs": bisect.bisect_right(rows_ts, w + lateness)
                      - bisect.bisect_left(rows_ts, w - U)})
    keys1, keysn = ank1["graph_keys"], ankn["graph_keys"]
    per_fork = {c: [statistics.fmean(o["rows_per_s"]) for o in outs[c]] for c in CONFIGS}
    return {
        "input_rows": len(wl["rows"]), "files": wl["files"], "U_s": ank1["U_s"], "U_K_s": ank1["U_K_s"],
        "throughput_rows_per_s": {c: round(v, 1) for c, v in tput.items()},
        "all_runs_rows_per_s": {c: [round(x, 1) for x in v] for c, v in all_runs.items()},
        "forks_rows_per_s": {c: [round(x, 1) for x in v] for c, v in per_fork.items()},
        "ci95_rows_per_s": {c: ci95(v) for c, v in all_runs.items()},
        "ank1_over_backward_ci95": ci95([a / b for a, b in zip(per_fork["ank1"], per_fork["backward"], strict=True)]),
        "ankn_over_backward_ci95": ci95([a / b for a, b in zip(per_fork["ankn"], per_fork["backward"], strict=True)]),
        "ratio_vs_backward": {c: round(tput[c] / tput["backward"], 3) for c in CONFIGS},
        "ratio_vs_np": {c: round(tput[c] / tput["np"], 3) for c in CONFIGS},
        "alerts": {c: outs[c][-1]["alerts"] for c in ("np", "backward", "ank1")},
        "graph_items": {"ank1": len(keys1), "ankn": len(keysn)},
        "duplicates": {"ank1": len(keys1) - len(set(keys1)), "ankn": len(keysn) - len(set(keysn))},
        "ankn_equals_ank1_as_sets": set(keys1) == set(keysn),
        "latency_in_U": {"ank1": ank1["latency_in_U"], "ankn": ankn["latency_in_U"]},
        "ank1_state": {"max_state": ank1["max_state"], "final_state": ank1["final_state"], "samples": state,
                       "max_alive_window_inputs": max((x["alive_window_inputs"] for x in state), default=None)},
    }


def _markdown(res: dict) -> str:
    lines = ["## Provenance (Ananke): overhead, latency, ANK-1 state", "",
             "Same generated workload, same queries, each configuration in JVMs of its own "
             f"({'quick' if res['quick'] else 'full'} size; {_runs_text(res)}; the median run; a workload "
             "measured in another run says so below). "
             "Targets: ANK-1 loses <= 5% throughput vs backward provenance only (A 6.1), ANK-N <= 10%; "
             "each 95 % interval (of the per-fork ratios, forks paired by their place in the design) must "
             "lie on one side of its target.", "",
             "| workload | rows | U | np rows/s | backward | ANK-1 | ANK-N | ANK-1 / backward (95 % CI) | ANK-N / backward | ANK-N = ANK-1 (sets) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, w in res["workloads"].items():
        t, r = w["throughput_rows_per_s"], w["ratio_vs_backward"]
        lines.append(f"| {name} | {w['input_rows']} | {w['U_s'] / 3600:.3g} h | {t['np']:.0f} | {t['backward']:.0f} | "
                     f"{t['ank1']:.0f} | {t['ankn']:.0f} | {r['ank1']:.3f}{_ci(w.get('ank1_over_backward_ci95'))} | "
                     f"{r['ankn']:.3f}{_ci(w.get('ankn_over_backward_ci95'))} | "
                     f"{w['ankn_equals_ank1_as_sets']} |")
    when = [f"- {n}: {_runs_text(w)}, measured {w['measured_at']}"
            + (f", 1-minute load average {w['load_avg_1min'][0]} before, {w['load_avg_1min'][1]} after"
               if w.get("load_avg_1min") else "")
            for n, w in res["workloads"].items() if "forks" in w and "measured_at" in w]
    lines += ["", *when] if when else []
    noisy = [n for n, w in res["workloads"].items()
             if w["throughput_rows_per_s"]["np"] < w["throughput_rows_per_s"]["backward"]]
    if noisy:
        lines += ["", f"**Warning:** in {', '.join(noisy)} the no-provenance run was *slower* than backward "
                  "provenance, which this run cannot explain (machine noise, or the JIT); the ratios of "
                  "this run do not resolve differences of a few percent."]
    lines += ["", "Provenance latency, mean (max) in multiples of U (A fig. 15):", "",
              "| workload | variant | SINK | SOURCE | EDGE | SINK-L | SOURCE-L | items before 1st watermark (left out) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, w in res["workloads"].items():
        for v in ("ank1", "ankn"):
            lat = w["latency_in_U"][v]
            cells = [f"{lat[k]['mean']:.2f} ({lat[k]['max']:.2f})" if lat[k] else "-"
                     for k in ("SINK", "SOURCE", "EDGE", "SINK-L", "SOURCE-L")]
            lines.append(f"| {name} | {v} | " + " | ".join(cells) + f" | {lat['before_first_watermark']} |")
    lines += ["", "ANK-1 state |T| (alive source vertices) vs input tuples inside the alive window [W-U, W+lateness]:", ""]
    for name, w in res["workloads"].items():
        s = w["ank1_state"]
        lines.append(f"- {name}: max |T| = {s['max_state']}, final |T| = {s['final_state']}, "
                     f"max alive-window inputs = {s['max_alive_window_inputs']}")
    lines += ["", "ANK-1 stamps items with the operator watermark W (Algorithm 1), so SINK latency is "
              "negative (W trails the sink tuple's time). ANK-N stamps with window ends (delay(τ) = "
              "(⌊τ/U⌋+2)U): its Delay and Forward-Once share one aggregate, which its sink vertices also "
              "go through (see `ananke/ankn.py`), so they are stamped later than in the paper. Spark micro-batch "
              "overheads dominate at these sizes on a shared 2-core machine: treat ratios as indicative."]
    return "\n".join(lines)


def _runs_text(res: dict) -> str:
    """How the configurations ran.

    >>> _runs_text({"forks": 4, "warm": 3, "runs": 2})
    '4 JVMs each, 2 measured runs in each after 3 discarded'
    """
    return f"{res['forks']} JVMs each, {res['runs']} measured runs in each after {res['warm']} discarded"


def _bounds(ci) -> str:
    """A 95 % interval as the tables show it: three decimals, so that a bound just under
    the 0.95 target (0.9487) does not read as meeting it (0.95).

    >>> _bounds([0.94871, 1.0526])
    '0.949-1.053'
    """
    return f"{ci[0]:.3f}-{ci[1]:.3f}"


def _ci(ci) -> str:
    return f" ({_bounds(ci)})" if ci else ""


def _figure(res: dict):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # matplotlib missing: publish without a plot
        return None
    names = list(res["workloads"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.2
    for k, c in enumerate(CONFIGS):
        axes[0].bar([i + k * width for i in range(len(names))],
                    [res["workloads"][n]["ratio_vs_np"][c] for n in names], width, label=c)
    axes[0].set_xticks([i + 1.5 * width for i in range(len(names))], names)
    axes[0].set_ylabel("throughput / no provenance")
    axes[0].legend(fontsize=8)
    kinds = ["SINK", "SOURCE", "EDGE", "SINK-L", "SOURCE-L"]
    for k, v in enumerate(("ank1", "ankn")):
        for j, n in enumerate(names):
            lat = res["workloads"][n]["latency_in_U"][v]
            axes[1].bar([i + (2 * j + k) * 0.2 for i in range(len(kinds))],
                        [lat[x]["mean"] if lat[x] else 0 for x in kinds], 0.2, label=f"{n} {v}")
    axes[1].set_xticks([i + 0.3 for i in range(len(kinds))], kinds)
    axes[1].set_ylabel("provenance latency / U")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def targets(data: dict) -> list[dict]:
    """A 6.1: ANK-1 loses <= 5 % throughput against backward provenance only; ANK-N
    <= 10 % (:data:`GOALS`).
    A run whose no-provenance configuration came out slower than backward provenance
    cannot resolve a few percent: unresolved, not met. The note counts the forks
    (paired by their place in the design) where it did, which tells a slip from a
    configuration that is slower every time.

    >>> w = {"throughput_rows_per_s": {"np": 9.0, "backward": 10.0}, "ratio_vs_backward": {"ank1": 1.0},
    ...      "ank1_over_backward_ci95": [0.97, 1.02], "input_rows": 5,
    ...      "forks_rows_per_s": {"np": [9.0, 9.5, 11.0], "backward": [10.0, 10.0, 10.0]}}
    >>> [(t["met"], t["note"][:60]) for t in targets({"workloads": {"lr": w}, "forks": 3, "warm": 3, "runs": 2})]
    [(None, 'no-provenance ran slower than backward (median; in 2 of 3 fo')]
    """
    out = []
    for name, w in data["workloads"].items():
        for variant, goal in GOALS.items():
            if variant == "ankn" and "ankn_over_backward_ci95" not in w:
                continue  # a result stored before ANK-N had its interval
            t, r = w["throughput_rows_per_s"], w["ratio_vs_backward"][variant]
            ci = w.get(f"{variant}_over_backward_ci95")
            noisy = t["np"] < t["backward"]
            runs = w["forks_rows_per_s"]
            slower = sum(a < b for a, b in zip(runs.get("np", []), runs.get("backward", []), strict=False))
            if ci is not None and ci[0] < goal <= ci[1]:
                met, note = None, f"the 95 % interval straddles {goal}"
            else:
                met = False if r < goal else (None if noisy else True)
                note = (f"no-provenance ran slower than backward (median; in {slower} of {len(runs.get('np', []))} "
                        f"forks), so the run does not show what provenance costs"
                        if noisy and r >= goal else "")
            shown = f"{r:.3f}x" + (f" (95 % CI {_bounds(ci)})" if ci else "")
            when = f", measured {w['measured_at']}" if w.get("measured_at") else ""
            label = {"ank1": "ANK-1", "ankn": "ANK-N"}[variant]
            out.append(target(f"{label} vs backward-only provenance throughput, {name} ({w['input_rows']:,} rows, "
                              f"{_runs_text(w if 'forks' in w else data)}{when})", f">= {goal}x", shown, met, note))
    return out


if __name__ == "__main__":
    raise SystemExit(exit_code(targets(main())))
