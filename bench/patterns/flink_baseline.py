"""Pattern matching against Flink SQL ``MATCH_RECOGNIZE``, on the maritime rows (T 5.2).

The leading CEP engine, run in the same run on the same machine: Flink (PyFlink, the
``apache-flink`` wheel with its ``flink-cep`` jar) in its own virtual environment,
``bench/.venv-flink`` (created when absent). Both engines get:

- **the same rows**: the maritime scenario (``moirae/sources/maritime.py``) written once
  as a header-less CSV, which each engine reads and parses inside its timed span;
- **the same patterns**: 1, 16 and 48 of ``moirae.sources.maritime_patterns.variants``
  (T 5.2.3's workload sizes: the seven behaviours of T Defs. 5.10-5.16, the approach of
  each port, the behaviours with other thresholds), in the SQL subset both accept;
- **the same 2 cores**: Flink with parallelism 2 (streaming mode over the bounded file,
  rowtime ``ts`` with a watermark, every pattern in one job as a ``UNION ALL`` of their
  queries, matches collected to the client; timed from submitting the job to the last
  match, after an untimed warm-up job in the same JVM, all of Flink's runs first); ours
  with 2 worker processes,
  the vessels split by hash (a keyed exchange), each running
  ``moirae.patterns.Matcher`` (the matcher the Spark engine runs per key) over its
  vessels, timed from reading the CSV to the last match gathered.

Measured: rows per second of each, their ratio per round (ours / Flink's), and whether
the matches are identical (pattern, vessel, first and last row time). What ours is *not*:
the Spark streaming path (micro-batches, state store, archive); the JSON says so.

Targets: the matches are identical for every workload; our throughput is at least 0.5x
Flink's with 1, 16 and 48 patterns.

Run: ``python -m bench flink_baseline [--quick]`` (published as ``flink_baseline_quick``
when quick).
"""

from __future__ import annotations

import argparse
import os
import statistics

from bench.harness import exit_code, publish, spread_note, target, verdict
from bench.patterns._maritime import compare, dataset, ensure_flink, flink, ours
from moirae.sources.maritime_patterns import variants

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/patterns/flink_baseline.py", "bench/patterns/_maritime.py", "bench/patterns/flink",
            "moirae/patterns", "moirae/sources/maritime.py", "moirae/sources/maritime_patterns.py")

GOAL = 0.5
COUNTS = (1, 16, 48)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench flink_baseline")
    ap.add_argument("--quick", action="store_true", help="a small run (< 2 min of matching)")
    ap.add_argument("--vessels", type=int, default=None)
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--rounds", type=int, default=None, help="timed runs per engine and workload")
    args = ap.parse_args(argv)
    name = "flink_baseline_quick" if args.quick else "flink_baseline"
    vessels = args.vessels or (40 if args.quick else 200)
    hours = args.hours or (6.0 if args.quick else 12.0)
    rounds = args.rounds or (1 if args.quick else 3)
    path, _ = dataset(vessels, hours)
    warm, _ = dataset(4, 1.0, seed=3)
    rows = sum(1 for _ in open(path, "rb"))
    small_rows = sum(1 for _ in open(warm, "rb"))
    data: dict = {"vessels": vessels, "hours": hours, "rows": rows, "small_rows": small_rows, "rounds": rounds, "counts": list(COUNTS),
                  "ours_is": "moirae.patterns.Matcher in 2 forked processes (vessels split by hash), reading "
                             "the same CSV; not the Spark streaming engine path",
                  "flink_is": "PyFlink 1.20 Table API, streaming mode over the bounded CSV (filesystem "
                              "connector), parallelism 2, all patterns in one job (UNION ALL), warm JVM",
                  "workloads": {}}
    data["load_avg_1m_before"] = round(os.getloadavg()[0], 2)
    py, err = ensure_flink()
    data["flink_error"] = err or None
    loads = {str(n): variants(n) for n in COUNTS}
    fl: dict = {}
    if py is not None:  # Flink first, every workload in one warm JVM
        fl = flink(py, path, loads, warm, reps=rounds)
        data["flink_error"] = fl.get("error")
        data["flink_version"] = fl.get("flink")
        data["flink_warmup_s"] = fl.get("warmup_s")
    for key, pats in loads.items():
        w: dict = {"ours_s": [], "flink_s": [], "ours_small_s": [], "flink_small_s": []}
        mine: list = []
        for _ in range(rounds):
            secs, mine = ours(path, pats)
            w["ours_s"].append(round(secs, 3))
            w["ours_small_s"].append(round(ours(warm, pats)[0], 3))
        w["match_count"] = len(mine)
        theirs = (fl.get("workloads") or {}).get(key)
        if theirs:
            w["flink_s"] = [round(r["seconds"], 3) for r in theirs["runs"]]
            w["comparison"] = compare(mine, theirs["matches"])
            w["ratio"] = [round(f / o, 3) for o, f in zip(w["ours_s"], w["flink_s"], strict=False)]
            w["flink_small_s"] = [round(r["seconds"], 3) for r in theirs["small_runs"]]
            # marginal: the extra time of the big file over the small one (each engine's fixed cost out)
            w["marginal_ratio"] = [round((f - fs) / max(1e-3, o - os_), 3) for o, os_, f, fs in zip(
                w["ours_s"], w["ours_small_s"], w["flink_s"], w["flink_small_s"], strict=False)]
        w["ours_rows_per_s"] = [round(rows / s) for s in w["ours_s"]]
        w["flink_rows_per_s"] = [round(rows / s) for s in w["flink_s"]]
        data["workloads"][key] = w
        print(f"{key} patterns: ours {w['ours_s']} s, flink {w['flink_s']} s, ratio {w.get('ratio')}, "
              f"identical {w.get('comparison', {}).get('identical')}", flush=True)
    data["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    ts = targets(data)
    publish(name, data, markdown(data, name), figure(data), targets=ts)
    print(markdown(data, name))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    out = []
    ws = data["workloads"]
    if data.get("flink_error"):
        out.append(target("flink_baseline: Flink SQL MATCH_RECOGNIZE runs here", "runs",
                          f"failed: {data['flink_error']}", None, "no baseline: ratios not measured"))
        return out
    same = [ws[k]["comparison"]["identical"] for k in ws]
    out.append(target("flink_baseline: matches identical to Flink's (pattern, vessel, first and last row time)",
                      "identical for 1, 16, 48 patterns",
                      ", ".join(f"{k}: {ws[k]['comparison']['same']}/{ws[k]['comparison']['flink']}" for k in ws),
                      all(same)))
    for k, w in ws.items():
        r = w["ratio"]
        out.append(target(f"flink_baseline: our throughput / Flink's, {k} pattern{'s' if k != '1' else ''}",
                          f">= {GOAL:g}x", f"{statistics.median(r):.2f}x (rounds {', '.join(f'{x:.2f}' for x in r)})",
                          verdict(r, GOAL, exact=False), spread_note(r, GOAL)))
    return out


def markdown(data: dict, name: str) -> str:
    ws = data["workloads"]
    lines = [f"## Patterns: against Flink SQL MATCH_RECOGNIZE (`{name}`)", "",
             f"The maritime scenario's rows ({data['rows']:,} rows: {data['vessels']} vessels, {data['hours']:g} h, "
             "one row per vessel every 30 s), the same CSV for both engines, parsed inside the timed span; "
             f"{data['rounds']} timed round(s) per engine and workload (Flink's first, in one warm JVM). The "
             f"machine's 1-minute load average was {data.get('load_avg_1m_before')} before and "
             f"{data.get('load_avg_1m_after')} after (2 cores, shared).", "",
             f"- **Ours**: {data['ours_is']}.", f"- **Flink**: {data['flink_is']}.", ""]
    if data.get("flink_error"):
        lines += [f"Flink could not run here: `{data['flink_error']}`. No ratio was measured.", ""]
    lines += ["| patterns | matches | identical to Flink | ours rows/s | Flink rows/s | ours / Flink | "
              "ours / Flink, fixed costs out |", "|---:|---:|---|---:|---:|---:|---:|"]
    for k, w in ws.items():
        c = w.get("comparison", {})
        ratio = f"{statistics.median(w['ratio']):.2f}x" if w.get("ratio") else "-"
        marg = f"{statistics.median(w['marginal_ratio']):.2f}x" if w.get("marginal_ratio") else "-"
        lines.append(f"| {k} | {w['match_count']} | {c.get('identical', '-')} | {_med(w['ours_rows_per_s'])} | "
                     f"{_med(w['flink_rows_per_s'])} | {ratio} | {marg} |")
    lines += ["", f"*Fixed costs out*: each engine also ran every workload on a {data.get('small_rows')}-row file; "
              "the ratio of the extra seconds the big file took (Flink's job planning and deployment, our "
              "process start and pattern compilation, taken out). The targets judge the end-to-end ratio.",
              "", "Goal: >= 0.5x Flink with 1, 16 and 48 patterns, the same matches. Ours is the matcher alone "
              "(no Spark micro-batches, state store or archive), so this compares the pattern engines, not "
              "Moirae's streaming path end to end."]
    return "\n".join(lines)


def _med(xs) -> str:
    return f"{statistics.median(xs):,.0f}" if xs else "-"


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = data["workloads"]
    ks = list(ws)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    xs = range(len(ks))
    med = [statistics.median(ws[k]["ours_rows_per_s"]) for k in ks]
    ax.bar([x - 0.2 for x in xs], med, 0.4, label="ours (matcher, 2 processes)")
    if all(ws[k]["flink_rows_per_s"] for k in ks):
        ax.bar([x + 0.2 for x in xs], [statistics.median(ws[k]["flink_rows_per_s"]) for k in ks], 0.4,
               label="Flink SQL (parallelism 2)")
    ax.set_xticks(list(xs), [f"{k} patterns" for k in ks])
    ax.set_ylabel("rows/s")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    return fig


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, data["benchmark"])


if __name__ == "__main__":
    raise SystemExit(main())
