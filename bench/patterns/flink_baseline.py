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
  match, in one JVM that serves every run); ours through the path a user's rows take
  (``bench/patterns/_spark_path.py``): Spark Structured Streaming on ``local[2]``, the CSV
  read as a file stream, one live operator running all the workload's patterns
  (``pattern_set_stream``, what ``Engine.pattern_queries`` deploys: one
  ``transformWithStateInPandas`` per vessel with each pattern's matcher state, RocksDB
  state, provenance on; matches collected to the driver), timed from the query's start to
  the micro-batch whose watermark passed every row;
- **the same warm-up**, untimed: every workload on a small file, then the one-pattern
  workload on the big file, in each engine;
- **interleaved rounds**: in each round, each workload runs in both engines back to back
  (Spark first in odd rounds, Flink first in even ones), so each round's ratio is taken
  from two neighbouring runs under the same load; the 1-minute load average is recorded
  before each pair.

Measured: rows per second of each, their ratio (ours through Spark / Flink's), and
whether the matches are identical (pattern, vessel, first and last row time). An extra
column, not judged: the bare matcher (``moirae.patterns.Matcher`` in 2 forked processes,
vessels split by hash) over the same CSV, which is what the pattern engine costs
without Spark.

Targets: the matches are identical for every workload (Spark path and Flink); our
throughput through Spark is at least 0.5x Flink's with 1, 16 and 48 patterns.

Run: ``python -m bench flink_baseline [--quick] [--rounds N] [--small]`` (published as
``flink_baseline_quick`` when quick; ``--small`` adds runs on the small file that take each
engine's fixed cost out, an extra column).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.harness import exit_code, publish, spread_note, target, verdict
from bench.patterns._maritime import FlinkFailed, FlinkJob, compare, dataset, ensure_flink, ours, read_rows
from bench.patterns._spark_path import session, spark_matches
from moirae.sources.maritime_patterns import variants

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/patterns/flink_baseline.py", "bench/patterns/_maritime.py", "bench/patterns/_spark_path.py",
            "bench/patterns/flink", "moirae/patterns", "moirae/sources/maritime.py",
            "moirae/sources/maritime_patterns.py", "ananke/query.py")

GOAL = 0.5
COUNTS = (1, 16, 48)
#: a first pair's seconds at full size (288,000 rows), guessed before one has run (the budget)
FIRST_PAIR_S = {"1": 40.0, "16": 80.0, "48": 180.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench flink_baseline")
    ap.add_argument("--quick", action="store_true", help="a small run (< 2 min of matching)")
    ap.add_argument("--vessels", type=int, default=None)
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--rounds", default="3", help="timed runs per engine and workload: N, or per pattern "
                    "count as 1=N,16=N,48=N (a workload whose ratio is near the goal needs more rounds)")
    ap.add_argument("--budget", type=float, default=800.0, help="seconds (from the start) after which no further pair of runs "
                    "starts when it would not end in time (judged on the workload's last pair); what ran is "
                    "published")
    ap.add_argument("--until", default=None, help="a UTC wall-clock time HH:MM the budget also ends at (a run "
                    "that starts late in a shared slot still ends in time)")
    ap.add_argument("--small", action="store_true", help="also time every workload on the small file "
                    "(each engine's fixed cost, taken out in an extra column)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    if args.until:
        args.budget = min(args.budget, _seconds_until(args.until))
        if args.budget < 240:  # not even the warm-up and one pair: nothing measured, nothing published
            print(f"flink_baseline: {args.budget:.0f} s left before {args.until} UTC; not run")
            return 2
    name = "flink_baseline_quick" if args.quick else "flink_baseline"
    vessels = args.vessels or (40 if args.quick else 200)
    hours = args.hours or (6.0 if args.quick else 12.0)
    rounds = parse_rounds(args.rounds)
    path, _ = dataset(vessels, hours)
    warm, _ = dataset(4, 1.0, seed=3)
    rows = sum(1 for _ in open(path, "rb"))
    small_rows = sum(1 for _ in open(warm, "rb"))
    small = args.small
    data: dict = {"vessels": vessels, "hours": hours, "rows": rows, "small_rows": small_rows if small else None,
                  "rounds": rounds, "counts": list(COUNTS), "interleaved": True,
                  "spark_is": "Spark Structured Streaming (local[2], 2 shuffle partitions), the CSV as a file "
                              "stream, one live operator for all the patterns (pattern_set_stream: one "
                              "transformWithStateInPandas per vessel keeping each pattern's state, RocksDB "
                              "state, provenance on), matches collected; warm session",
                  "ours_is": "moirae.patterns.Matcher in 2 forked processes (vessels split by hash), reading "
                             "the same CSV; no Spark (not judged)",
                  "flink_is": "PyFlink 1.20 Table API, streaming mode over the bounded CSV (filesystem "
                              "connector), parallelism 2, all patterns in one job (UNION ALL), warm JVM",
                  "workloads": {}}
    data["load_avg_1m_before"] = round(os.getloadavg()[0], 2)
    py, err = ensure_flink()
    data["flink_error"] = err or None
    loads = {str(n): variants(n) for n in COUNTS}
    last, warm_last = read_rows(path)["ts"].max(), read_rows(warm)["ts"].max()
    ws: dict = {k: {"spark_s": [], "spark_progress": [], "ours_s": [], "flink_s": [], "spark_small_s": [],
                    "flink_small_s": [], "load_1m": [], "first": []} for k in loads}
    found: dict = {k: {} for k in loads}
    job = None
    try:
        if py is not None:
            job = FlinkJob(py)
            data["flink_version"] = job.version
        spark = session()
        # untimed warm-up, the same for both engines: every workload on the small file, then
        # the one-pattern workload on the big file (each JVM's JIT and each engine's caches)
        t0 = time.perf_counter()
        for pats in loads.values():
            spark_matches(spark, warm, pats, warm_last)
        spark_matches(spark, path, loads["1"], last)
        data["spark_warmup_s"] = round(time.perf_counter() - t0, 3)
        if job is not None:
            t0 = time.perf_counter()
            for pats in loads.values():
                job.run(warm, pats)
            job.run(path, loads["1"])
            data["flink_warmup_s"] = round(time.perf_counter() - t0, 3)
        pair_s: dict = {}
        for r in range(max(rounds.values())):  # interleaved: each round's ratio from two neighbouring runs
            for key, pats in loads.items():
                if r >= rounds[key]:
                    continue
                guess = pair_s.get(key, FIRST_PAIR_S.get(key, 0.0) * rows / 288_000)
                if time.monotonic() - start + guess > args.budget:
                    data.setdefault("skipped_rounds", []).append(f"{key} patterns, round {r + 1}")
                    continue
                t_pair = time.monotonic()
                w = ws[key]
                w["load_1m"].append(round(os.getloadavg()[0], 2))
                order = ("spark", "flink") if r % 2 == 0 else ("flink", "spark")
                w["first"].append(order[0] if job is not None else "spark")
                for engine in order:
                    if engine == "spark":
                        secs, found[key]["spark"] = spark_matches(spark, path, pats, last)
                        w["spark_s"].append(round(secs, 3))
                        w["spark_progress"].append(spark_matches.progress)
                        if small:
                            w["spark_small_s"].append(round(spark_matches(spark, warm, pats, warm_last)[0], 3))
                    elif job is not None:
                        secs, found[key]["flink"] = job.run(path, pats)
                        w["flink_s"].append(round(secs, 3))
                        if small:
                            w["flink_small_s"].append(round(job.run(warm, pats)[0], 3))
                if r == 0:  # the matcher alone (not judged): once per workload
                    secs_m, found[key]["matcher"] = ours(path, pats)
                    w["ours_s"].append(round(secs_m, 3))
                pair_s[key] = time.monotonic() - t_pair
                print(f"round {r + 1}, {key} patterns: spark {w['spark_s'][-1]} s, flink "
                      f"{w['flink_s'][-1] if w['flink_s'] else '-'} s, load {w['load_1m'][-1]}", flush=True)
    except FlinkFailed as exc:  # Flink's run failed: no baseline
        data["flink_error"] = str(exc)
    finally:
        if job is not None:
            job.close()
    for key, w in ws.items():
        mine = found[key].get("spark", [])
        w["match_count"] = len(mine)
        if w["flink_s"] and not data["flink_error"]:
            theirs = found[key]["flink"]
            w["comparison"] = compare(mine, theirs)
            w["matcher_comparison"] = compare(found[key]["matcher"], theirs)
            w["ratio"] = [round(f / o, 3) for o, f in zip(w["spark_s"], w["flink_s"], strict=False)]
            w["matcher_ratio"] = [round(f / o, 3) for o, f in zip(w["ours_s"], w["flink_s"], strict=False)]
            if small:
                # marginal: the extra time of the big file over the small one (each engine's fixed cost out)
                w["marginal_ratio"] = [round((f - fs) / max(1e-3, o - os_), 3) for o, os_, f, fs in zip(
                    w["spark_s"], w["spark_small_s"], w["flink_s"], w["flink_small_s"], strict=False)]
        w["spark_rows_per_s"] = [round(rows / s) for s in w["spark_s"]]
        w["ours_rows_per_s"] = [round(rows / s) for s in w["ours_s"]]
        w["flink_rows_per_s"] = [round(rows / s) for s in w["flink_s"]]
        data["workloads"][key] = w
        print(f"{key} patterns: spark {w['spark_s']} s, matcher {w['ours_s']} s, flink {w['flink_s']} s, "
              f"ratio {w.get('ratio')}, identical {w.get('comparison', {}).get('identical')}", flush=True)
    data["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    ts = targets(data)
    publish(name, data, markdown(data, name), figure(data), targets=ts)
    print(markdown(data, name))
    return exit_code(ts)


def _seconds_until(hhmm: str) -> float:
    """Seconds from now to the next UTC wall-clock time ``hhmm``."""
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    h, m = (int(x) for x in hhmm.split(":"))
    end = now.replace(hour=h, minute=m, second=0, microsecond=0)
    if end <= now - dt.timedelta(hours=12):
        end += dt.timedelta(days=1)
    return (end - now).total_seconds()


def parse_rounds(spec: str) -> dict[str, int]:
    """Rounds per workload from ``--rounds``: one count for all, or ``count=rounds`` pairs.

    >>> parse_rounds("3")
    {'1': 3, '16': 3, '48': 3}
    >>> parse_rounds("1=5,16=3,48=2")
    {'1': 5, '16': 3, '48': 2}
    """
    if "=" not in spec:
        return {str(n): int(spec) for n in COUNTS}
    got = {k.strip(): int(v) for k, v in (part.split("=") for part in spec.split(","))}
    return {str(n): got.get(str(n), 1) for n in COUNTS}


def targets(data: dict) -> list[dict]:
    out = []
    ws = data["workloads"]
    if data.get("flink_error"):
        out.append(target("flink_baseline: Flink SQL MATCH_RECOGNIZE runs here", "runs",
                          f"failed: {data['flink_error']}", None, "no baseline: ratios not measured"))
        return out
    if any("comparison" not in w for w in ws.values()):
        return out
    if any(not w.get("spark_s") for w in ws.values()):  # a result from before the Spark path was timed
        out.append(target("flink_baseline: our throughput through Spark / Flink's", f">= {GOAL:g}x",
                          "not measured: this result timed the bare matcher only", None,
                          "rerun: python -m bench flink_baseline --quick"))
        return out
    same = [ws[k]["comparison"]["identical"] for k in ws]
    out.append(target("flink_baseline: matches through Spark identical to Flink's (pattern, vessel, first and "
                      "last row time)",
                      "identical for 1, 16, 48 patterns",
                      ", ".join(f"{k}: {ws[k]['comparison']['same']}/{ws[k]['comparison']['flink']}" for k in ws),
                      all(same)))
    for k, w in ws.items():
        r = w["ratio"]
        out.append(target(f"flink_baseline: our throughput through Spark / Flink's, {k} pattern{'s' if k != '1' else ''}",
                          f">= {GOAL:g}x", f"{statistics.median(r):.2f}x (rounds {', '.join(f'{x:.2f}' for x in r)})",
                          verdict(r, GOAL, exact=False), spread_note(r, GOAL)))
    return out


def markdown(data: dict, name: str) -> str:
    ws = data["workloads"]
    small = data.get("small_rows")
    lines = [f"## Patterns: against Flink SQL MATCH_RECOGNIZE (`{name}`)", "",
             f"The maritime scenario's rows ({data['rows']:,} rows: {data['vessels']} vessels, {data['hours']:g} h, "
             "one row per vessel every 30 s), the same CSV for both engines, parsed inside the timed span; "
             f"{_rounds(data['rounds'])} timed round(s) per engine and workload, interleaved (each workload in both engines "
             "back to back, who goes first alternating by round; one warm JVM each). The "
             f"machine's 1-minute load average was {data.get('load_avg_1m_before')} before"
             + (f", {data['load_avg_1m_flink']} after Flink's runs" if data.get("load_avg_1m_flink") else "")
             + f" and {data.get('load_avg_1m_after')} at the end (2 cores, shared).", "",
             f"- **Ours (judged)**: {data.get('spark_is')}.", f"- **Flink**: {data['flink_is']}.",
             f"- **Matcher only (not judged)**: {data['ours_is']}.", ""]
    if data.get("flink_error"):
        lines += [f"Flink could not run here: `{data['flink_error']}`. No ratio was measured.", ""]
    lines += ["| patterns | matches | identical to Flink | ours (Spark) rows/s | Flink rows/s | ours (Spark) / Flink | "
              "ours / Flink, fixed costs out | matcher only rows/s | matcher only / Flink |",
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for k, w in ws.items():
        c = w.get("comparison", {})
        ratio = f"{statistics.median(w['ratio']):.2f}x" if w.get("ratio") else "-"
        marg = f"{statistics.median(w['marginal_ratio']):.2f}x" if w.get("marginal_ratio") else "-"
        mr = f"{statistics.median(w['matcher_ratio']):.2f}x" if w.get("matcher_ratio") else "-"
        lines.append(f"| {k} | {w['match_count']} | {c.get('identical', '-')} | {_med(w.get('spark_rows_per_s'))} | "
                     f"{_med(w['flink_rows_per_s'])} | {ratio} | {marg} | {_med(w.get('ours_rows_per_s'))} | {mr} |")
    if small:
        lines += ["", f"*Fixed costs out*: each engine also ran every workload on a {small}-row file; the ratio "
                  "of the extra seconds the big file took (Flink's job planning and deployment, Spark's query "
                  "planning and start, taken out). The targets judge the end-to-end ratio."]
    else:
        lines += ["", "*Fixed costs out*: not measured in this run (``--small``)."]
    if data.get("skipped_rounds"):
        lines += ["", f"Rounds not run (the time budget of one hold of the benchmark lock): "
                  f"{', '.join(data['skipped_rounds'])}."]
    if data.get("interleaved"):
        lines += ["", "Rounds (seconds of each engine's run, their pair run back to back; load: the 1-minute "
                  "load average before the pair):", "",
                  "| patterns | round | first | ours (Spark) s | Flink s | ours / Flink | load |",
                  "|---:|---:|---|---:|---:|---:|---:|"]
        for k, w in ws.items():
            for i, (o, f) in enumerate(zip(w["spark_s"], w["flink_s"], strict=False)):
                lines.append(f"| {k} | {i + 1} | {w['first'][i]} | {o:.2f} | {f:.2f} | {f / o:.2f}x | "
                             f"{w['load_1m'][i]} |")
    lines += ["", "Goal: >= 0.5x Flink with 1, 16 and 48 patterns through Spark, the same matches. The "
              "matcher-only column is the pattern engine without Spark (no micro-batches, state store or "
              "shuffle), for reference."]
    return "\n".join(lines)


def _rounds(r) -> str:
    return str(r) if isinstance(r, int) else ", ".join(f"{v} ({k} pattern{'s' if k != '1' else ''})"
                                                       for k, v in r.items())


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

    def med(k: str, col: str) -> float:
        return statistics.median(ws[k][col]) if ws[k].get(col) else 0.0

    ax.bar([x - 0.27 for x in xs], [med(k, "spark_rows_per_s") for k in ks], 0.27, label="ours through Spark")
    ax.bar(list(xs), [med(k, "flink_rows_per_s") for k in ks], 0.27, label="Flink SQL (parallelism 2)")
    ax.bar([x + 0.27 for x in xs], [med(k, "ours_rows_per_s") for k in ks], 0.27, label="matcher only (2 processes)")
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
