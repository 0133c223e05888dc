"""Pattern scale: throughput of the live pattern operator as patterns grow (1 to 48) and
keys grow (1k to 100k), and its per-key state against WITHIN
(``moirae/patterns/spark_processor.py``).

What runs is the operator's own code (several patterns in one operator,
:class:`moirae.patterns.spark_set.PatternSet`, as ``Engine.pattern_queries`` deploys
them), driven as Spark's ``transformWithStateInPandas``
drives it (per micro-batch: each key's new rows as one pandas frame, then its expired
event-time timers; the key's state saved as bytes between batches, as the state store
does), without a JVM: the figures are the operator's Python cost per row, which is what
grows with patterns and keys (Spark's shuffle and state-store I/O come on top and are
measured end to end by ``bench/patterns/latency.py``). Baseline, in the same run: the
same rows through the bare matcher (``Matcher.advance_frame``, no buffering, no state
bytes, rows already in order), so the ratio is the live wrapper's overhead.

Each point is the median of ``--rounds`` alternating runs of both (3 by default; the
100k-key point, whose operator run alone takes minutes, ``--big-rounds``, 2 by default, so
the full size fits one 15-minute hold of the benchmark lock). Full size: 1, 4, 16 and 48
patterns (1,000 keys x 20 rows; 200 keys with more than 4 patterns), 1k, 10k and 100k
keys (20 rows per key; 4 at 100k), WITHIN 10, 60 and 300 s over 100 keys x 60 rows.
Targets: the operator keeps at least 0.5x the bare matcher's rows/s at every point (its
buffering and state handling do not dominate), and its saved state per key grows at most
linearly with WITHIN (bytes per key at the largest WITHIN over the smallest at most the
ratio of the WITHINs).

Run: ``python -m bench scale [--quick]`` (published as ``scale_quick`` when quick).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import pandas as pd

from bench.harness import exit_code, publish, target

MEASURES = ("bench/patterns/scale.py", "moirae/patterns")

T0 = pd.Timestamp("2024-01-01", tz="UTC")
GOAL_RATIO = 0.5


def pattern_sql(i: int, within_s: int = 60) -> str:
    lo = i % 7
    return (f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n "
            f"PATTERN (A{{2,}} B) WITHIN INTERVAL '{within_s}' SECOND "
            f"DEFINE A AS x > {lo}, B AS x <= {lo})")


def rows_for(keys: int, per_key: int, seed: int = 0) -> pd.DataFrame:
    """``keys`` x ``per_key`` rows with the columns the engine's operator input carries
    for a source read directly (``moirae.patterns.spark_operator._operator`` with a
    ``stream``): the row id is the source id, and the provenance of the row's one source
    tuple travels as two numbers, its id (the row id) and its time in microseconds."""
    from moirae.patterns.spark_processor import IN_ID, IN_TUS
    from moirae.patterns.spark_schema import ROW_ID

    rng = np.random.default_rng(seed)
    n = keys * per_key
    ts = T0 + pd.to_timedelta(np.repeat(np.arange(per_key), keys) * 5 + rng.integers(0, 5, n), unit="s")
    df = pd.DataFrame({"k": np.tile([f"k{j}" for j in range(keys)], per_key), "x": rng.integers(0, 10, n) * 1.0,
                       "ts": ts})
    df[ROW_ID] = np.arange(n)
    df[IN_ID] = np.arange(n)
    df[IN_TUS] = ts.asi8 // 1000
    return df


class _Store:
    """One key's state-store value and timers, as Spark keeps them between batches."""

    def __init__(self) -> None:
        self.value, self.timers = None, set()

    def exists(self):
        return self.value is not None

    def get(self):
        return self.value

    def update(self, v):
        self.value = v

    def clear(self):
        self.value = None

    def getValueState(self, name, schema):  # noqa: N802 - pyspark's names
        return self

    def listTimers(self):  # noqa: N802
        return iter(list(self.timers))

    def deleteTimer(self, t):  # noqa: N802
        self.timers.discard(t)

    def registerTimer(self, t):  # noqa: N802
        self.timers.add(t)


class _TV:
    def __init__(self, wm):
        self.wm = wm

    def getCurrentWatermarkInMs(self):  # noqa: N802
        return self.wm


def run_operator(sqls: list[str], rows: pd.DataFrame, batches: int) -> tuple[float, int, list[int]]:
    """Seconds to run every pattern over ``rows`` in ``batches`` micro-batches (one
    operator for all of them, as ``Engine.pattern_queries`` deploys); matches; the saved
    state's bytes per key at the end of the last data batch."""
    from moirae.patterns import compile_pattern
    from moirae.patterns.spark_processor import PatternCore, PatternSet, processor
    from moirae.patterns.spark_schema import ROW_ID

    cols = {"k": "string", "x": "double", "ts": "timestamp"}
    cores = [PatternCore(compile_pattern(s, name=f"p{i}", columns=cols, row_id=ROW_ID), "eid", "ts", ("n",))
             for i, s in enumerate(sqls)]
    ops = [cores[0] if len(cores) == 1 else PatternSet(cores, tag="pattern")]
    parts = np.array_split(np.arange(len(rows)), batches)
    stores: list[dict] = [{} for _ in ops]
    matches, wm = 0, -1
    processor(ops[0])  # pyspark's import, off the clock (Spark's Python worker has it loaded)
    t0 = time.perf_counter()
    sizes: list[int] = []
    for b, idx in enumerate([*parts, np.array([], dtype=int)]):
        batch = rows.iloc[idx]
        if b == len(parts):
            wm = int(rows["ts"].max().value // 1_000_000) + 3_600_000
            sizes = [len(s.value[0]) for st in stores for s in st.values() if s.value is not None]
        for op, st in zip(ops, stores, strict=True):
            proc = processor(op)
            # one key's rows at a time, as Spark hands them to the processor: a list of
            # every group's frame, alive through the batch, would make the collector's
            # full passes (and so the operator's clock) pay for 10k frames the operator
            # never holds at once in Spark
            for key, part in (batch.groupby("k", sort=False) if len(batch) else ()):
                s = st.setdefault(key, _Store())
                proc.init(s)
                for f in proc.handleInputRows((key,), iter([part]), _TV(wm)):
                    matches += len(f)
            for key, s in st.items():
                due = [t for t in s.timers if t <= wm]
                if due:
                    s.timers.difference_update(due)
                    proc.init(s)
                    for f in proc.handleExpiredTimer((key,), _TV(wm), None):
                        matches += len(f)
        if len(batch):
            wm = max(wm, int(batch["ts"].max().value // 1_000_000) - 10_000)
    return time.perf_counter() - t0, matches, sizes


def run_bare(sqls: list[str], rows: pd.DataFrame, batches: int) -> tuple[float, int]:
    from moirae.patterns import Matcher, compile_pattern
    from moirae.patterns.spark_schema import ROW_ID

    cols = {"k": "string", "x": "double", "ts": "timestamp"}
    ms = [Matcher(compile_pattern(s, name=f"p{i}", columns=cols, row_id=ROW_ID)) for i, s in enumerate(sqls)]
    ordered = rows.sort_values(["ts", ROW_ID], kind="stable")
    parts = np.array_split(np.arange(len(ordered)), batches)
    states: list[dict] = [{} for _ in ms]
    n = 0
    t0 = time.perf_counter()
    for idx in parts:
        batch = ordered.iloc[idx]
        for i, m in enumerate(ms):
            got, states[i] = m.advance_frame(states[i], batch, watermark=batch["ts"].max())
            n += len(got)
    for i, m in enumerate(ms):
        for st in states[i].values():
            n += len(m.finish(st)[0])
    return time.perf_counter() - t0, n


def _rounds(op, bare, rounds: int) -> tuple[float, float, int, list[float]]:
    """Alternating runs of the operator and the bare matcher: median seconds of each, the
    operator's matches, and the ratio (bare seconds / operator seconds) of each round."""
    t_ops, t_bares, ratios, m = [], [], [], 0
    for _ in range(max(1, rounds)):
        t_op, m = op()
        t_bare = bare()
        t_ops.append(t_op)
        t_bares.append(t_bare)
        ratios.append(round(t_bare / t_op, 3))
    return statistics.median(t_ops), statistics.median(t_bares), m, ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="alternating operator/bare runs per point (median)")
    ap.add_argument("--big-rounds", type=int, default=2, help="the same at 50k keys and more")
    args = ap.parse_args(argv)
    name = "scale_quick" if args.quick else "scale"
    pattern_counts = [1, 4, 16, 48] if not args.quick else [1, 4, 16]
    key_counts = [1_000, 10_000, 100_000] if not args.quick else [100, 400]
    per_key = 20 if not args.quick else 6
    few = 200 if not args.quick else 10  # keys when there are more than 4 patterns
    data: dict = {"quick": args.quick, "patterns": [], "keys": [], "state": [], "rounds": args.rounds,
                  "big_rounds": args.big_rounds, "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    base_rows = rows_for(1_000 if not args.quick else 40, per_key)
    for p in pattern_counts:
        sqls = [pattern_sql(i) for i in range(p)]
        sub = base_rows if p <= 4 else base_rows[base_rows["k"].isin([f"k{j}" for j in range(few)])]
        t_op, t_bare, m_op, ratios = _rounds(lambda sqls=sqls, sub=sub: run_operator(sqls, sub, 4)[:2],
                                             lambda sqls=sqls, sub=sub: run_bare(sqls, sub, 4)[0], args.rounds)
        data["patterns"].append({"patterns": p, "rows": len(sub), "op_rows_per_s": round(len(sub) * p / t_op, 1),
                                 "bare_rows_per_s": round(len(sub) * p / t_bare, 1), "matches": m_op,
                                 "ratio": round(statistics.median(ratios), 3), "ratios": ratios})
        print(data["patterns"][-1], flush=True)
    for k in key_counts:
        rows = rows_for(k, 4 if k >= 50_000 or args.quick else per_key, seed=1)
        t_op, t_bare, _m, ratios = _rounds(lambda rows=rows: run_operator([pattern_sql(0)], rows, 2)[:2],
                                           lambda rows=rows: run_bare([pattern_sql(0)], rows, 2)[0],
                                           args.big_rounds if k >= 50_000 else args.rounds)
        data["keys"].append({"keys": k, "rows": len(rows), "op_rows_per_s": round(len(rows) / t_op, 1),
                             "bare_rows_per_s": round(len(rows) / t_bare, 1), "ratio": round(statistics.median(ratios), 3),
                             "ratios": ratios})
        print(data["keys"][-1], flush=True)
    state_rows = rows_for(100 if not args.quick else 5, 60, seed=2)
    for w in (10, 60, 300):
        _t, _m, sizes = run_operator([pattern_sql(0, w).replace("x > 0", "x > -1")], state_rows, 3)
        data["state"].append({"within_s": w, "bytes_per_key": round(float(np.mean(sizes)), 1) if sizes else 0.0})
        print(data["state"][-1], flush=True)
    data["load_avg_1m"] = round(os.getloadavg()[0], 2)
    worst = min(x["ratio"] for x in data["patterns"] + data["keys"])
    s0, s1 = data["state"][0], data["state"][-1]
    growth = s1["bytes_per_key"] / max(s0["bytes_per_key"], 1.0)
    ts = [target("live pattern operator rows/s vs the bare matcher (worst point)", f">= {GOAL_RATIO}x",
                 f"{worst}x", worst >= GOAL_RATIO),
          target("state per key against WITHIN (300 s over 10 s)", "<= 30x (linear)", f"{growth:.1f}x",
                 growth <= 30.0)]
    lines = ["| patterns | rows | operator rows/s | bare matcher rows/s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {x['patterns']} | {x['rows']} | {x['op_rows_per_s']} | {x['bare_rows_per_s']} | {x['ratio']} |"
              for x in data["patterns"]]
    lines += ["", "| keys | rows | operator rows/s | bare matcher rows/s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {x['keys']} | {x['rows']} | {x['op_rows_per_s']} | {x['bare_rows_per_s']} | {x['ratio']} |"
              for x in data["keys"]]
    lines += ["", "| WITHIN (s) | saved state per key (bytes) |", "|---|---|"]
    lines += [f"| {x['within_s']} | {x['bytes_per_key']} |" for x in data["state"]]
    md = (f"## Pattern scale{' (quick)' if args.quick else ''}\n\n"
          f"`python -m bench scale{' --quick' if args.quick else ''}`: the live operator's code driven as Spark "
          "drives it, without a JVM (per micro-batch, per key: rows, then timers; state as bytes between batches; "
          "several patterns in one operator, as `Engine.pattern_queries` deploys them), "
          "against the bare matcher on the same rows in the same run, median of alternating rounds (pattern rows/s count each row once per "
          "pattern; with more than 4 patterns fewer keys are used, see the JSON). Spark's shuffle and state store are not in "
          f"these figures. Rounds per point: {data['rounds']} ({data['big_rounds']} at 50k keys and more). The bare "
          "matcher converts each batch's columns once and slices them per key (`Matcher.advance_frame`); the "
          "operator is called per key, as Spark calls it. Load average (1 minute): "
          f"{data['load_avg_1m_before']} before, {data['load_avg_1m']} after, on {os.cpu_count()} CPUs.\n\n" + "\n".join(lines) + "\n")
    fig = None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3))
        axes[0].plot([x["patterns"] for x in data["patterns"]], [x["op_rows_per_s"] for x in data["patterns"]], "o-",
                     label="operator")
        axes[0].plot([x["patterns"] for x in data["patterns"]], [x["bare_rows_per_s"] for x in data["patterns"]],
                     "s--", label="bare matcher")
        axes[0].set_xlabel("patterns")
        axes[0].set_ylabel("pattern-rows/s")
        axes[0].legend()
        axes[1].plot([x["keys"] for x in data["keys"]], [x["op_rows_per_s"] for x in data["keys"]], "o-")
        axes[1].plot([x["keys"] for x in data["keys"]], [x["bare_rows_per_s"] for x in data["keys"]], "s--")
        axes[1].set_xscale("log")
        axes[1].set_xlabel("keys")
        axes[2].plot([x["within_s"] for x in data["state"]], [x["bytes_per_key"] for x in data["state"]], "o-")
        axes[2].set_xlabel("WITHIN (s)")
        axes[2].set_ylabel("bytes per key")
    except ImportError:
        pass
    publish(name, data, md, fig, targets=ts)
    print(md)
    return exit_code(ts)


if __name__ == "__main__":
    raise SystemExit(main())
