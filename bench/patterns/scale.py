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
bytes, rows already in order), fed at the same micro-batches under the same watermarks
(:func:`schedule`: the first batch has none, as in Spark; each batch's rows are fed once
the watermark has passed them, as the operator feeds them), so the ratio is the live
wrapper's overhead.

Also in the same run, on the same rows and batches and by the same driving loop
(:func:`drive`), the keyed-API floor (:func:`floor_processor`): a processor that does the
least any stateful processor under this API does per key (it reads its key's value and
writes back a few bytes, outputs nothing, sets no timer). Its time is what the API costs
whatever the processor: the split of each batch into one frame per key (done by Spark's
Python worker), one call into the processor per key, and the key's state read and
written as bytes. The bare matcher pays none of it (it slices one frame's arrays per key),
so no processor under this API can reach the bare matcher's rate: the best one could is
``bare / (bare + floor)`` (the ceiling). The target is therefore judged on the operator's
own work, ``bare / (operator - floor)``; the raw ratio ``bare / operator`` is reported
beside it. Each ratio is computed from one round's own times (:func:`round_ratios`).

Each point runs ``--rounds`` rounds of the three (3 by default; the 100k-key point, the
longest, ``--big-rounds``, 2 by default), in an order that changes by round
(:func:`bench.harness.run_orders`); figures are the rounds' medians.
Full size: 1, 4, 16 and 48 patterns (1,000 keys x 20 rows in 4 batches; 200 keys with
more than 4 patterns), 1k, 10k and 100k keys (20 rows per key; 4 at 100k; 2 batches),
WITHIN 10, 60 and 300 s over 100 keys x 60 rows.
Targets: the operator's own work keeps at least 0.5x the bare matcher's rows/s at every
point, in every round (its buffering and state handling do not dominate); the operator
and the bare matcher find the same matches at every point; and its saved state per key
grows at most linearly with WITHIN (bytes per key at the largest WITHIN over the
smallest at most the ratio of the WITHINs).

Run: ``python -m bench scale [--quick]`` (published as ``scale_quick`` when quick).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from bench.harness import exit_code, publish, run_orders, spread_note, target, verdict

MEASURES = ("bench/patterns/scale.py", "moirae/patterns")

T0 = pd.Timestamp("2024-01-01", tz="UTC")
GOAL_RATIO = 0.5
LATE_MS = 10_000  # the watermark trails the latest event time seen by this much
END_MS = 3_600_000  # the last step's watermark: this far past every row
RUNS = ("operator", "floor", "bare")


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


def schedule(ts_ms: np.ndarray, batches: int) -> tuple[list[np.ndarray], list[int]]:
    """The micro-batches of rows with event times ``ts_ms`` (milliseconds, in arrival
    order): each batch's row positions, then one more with none, in which the watermark
    passes every row; and the watermark (ms) of each, -1 for none (Spark's first batch):
    from the second batch on, the latest event time of the batches before, less
    :data:`LATE_MS`, never moving back.

    >>> parts, wms = schedule(np.array([20_000, 30_000, 15_000, 50_000]), 2)
    >>> [p.tolist() for p in parts], wms
    ([[0, 1], [2, 3], []], [-1, 20000, 3650000])
    """
    parts = [*np.array_split(np.arange(len(ts_ms)), batches), np.array([], dtype=np.int64)]
    wms, wm = [], -1
    for idx in parts[:-1]:
        wms.append(wm)
        if len(idx):
            wm = max(wm, int(ts_ms[idx].max()) - LATE_MS)
    wms.append(int(ts_ms.max()) + END_MS if len(ts_ms) else wm)
    return parts, wms


def released(ts_ms: np.ndarray, parts: list[np.ndarray], wms: list[int]) -> np.ndarray:
    """For each row, the step of :func:`schedule` at which the operator feeds it to its
    matcher: the first one, at or after the row's batch, whose watermark has passed it.

    >>> parts, wms = schedule(np.array([20_000, 30_000, 15_000, 50_000]), 2)
    >>> released(np.array([20_000, 30_000, 15_000, 50_000]), parts, wms).tolist()
    [1, 2, 1, 2]
    """
    arrival = np.empty(len(ts_ms), dtype=np.int64)
    for b, idx in enumerate(parts):
        arrival[idx] = b
    return np.maximum(arrival, np.searchsorted(np.asarray(wms), ts_ms, side="left"))


def _ts_ms(rows: pd.DataFrame) -> np.ndarray:
    return pd.DatetimeIndex(rows["ts"]).asi8 // 1_000_000


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


def floor_processor():
    """The keyed-API floor: a ``StatefulProcessor`` doing the least any stateful processor
    does per key, with the operator's state access (``moirae.patterns.spark_processor.processor``:
    one value state of one bytes column, read at each call and written back); it reads the
    key's frames, outputs nothing and sets no timer."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("b", BinaryType())])

    class _Floor(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("floor", schema)

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - pyspark's names
            for _ in rows:  # the key's frames, as any processor reads them (Spark makes them as they are read)
                pass
            saved = self.state.get()
            self.state.update((b"\x00" if saved is None else saved[0],))
            return iter(())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            return iter(())

        def close(self) -> None:
            pass

    return _Floor()


def drive(make_processor: Callable[[], object], rows: pd.DataFrame, batches: int) -> tuple[float, int, list[int]]:
    """Run a stateful processor over ``rows`` in ``batches`` micro-batches of
    :func:`schedule`, as Spark's ``transformWithStateInPandas`` drives it: per batch, one
    processor from ``make_processor``, each key's rows as one pandas frame (a pandas
    groupby of the batch), then each key's timers the watermark has passed; each key's
    state kept between batches. Returns the seconds taken, the output rows, and each
    key's saved state in bytes at the end of the last data batch (taken off the clock)."""
    parts, wms = schedule(_ts_ms(rows), batches)
    stores: dict = {}
    out = 0
    make_processor()  # pyspark's import, off the clock (Spark's Python worker has it loaded)
    sizes: list[int] = []
    t0 = time.perf_counter()
    for b, (idx, wm) in enumerate(zip(parts, wms, strict=True)):
        if b == len(parts) - 1:
            t1 = time.perf_counter()
            sizes = [len(s.value[0]) for s in stores.values() if s.value is not None]
            t0 += time.perf_counter() - t1
        batch = rows.iloc[idx]
        proc = make_processor()
        # one key's rows at a time, as Spark hands them to the processor: a list of
        # every group's frame, alive through the batch, would make the collector's
        # full passes (and so the clock) pay for 10k frames the processor never holds
        # at once in Spark
        for key, part in (batch.groupby("k", sort=False) if len(batch) else ()):
            s = stores.get(key)
            if s is None:
                s = stores[key] = _Store()
            proc.init(s)
            for f in proc.handleInputRows((key,), iter([part]), _TV(wm)):
                out += len(f)
        for key, s in stores.items():
            due = [t for t in s.timers if t <= wm]
            if due:
                s.timers.difference_update(due)
                proc.init(s)
                for f in proc.handleExpiredTimer((key,), _TV(wm), None):
                    out += len(f)
    return time.perf_counter() - t0, out, sizes


def run_operator(sqls: list[str], rows: pd.DataFrame, batches: int) -> tuple[float, int, list[int]]:
    """:func:`drive` of the live operator running every pattern (one operator for all of
    them, as ``Engine.pattern_queries`` deploys): seconds, matches, state bytes per key."""
    from moirae.patterns import compile_pattern
    from moirae.patterns.spark_processor import PatternCore, PatternSet, processor
    from moirae.patterns.spark_schema import ROW_ID

    cols = {"k": "string", "x": "double", "ts": "timestamp"}
    cores = [PatternCore(compile_pattern(s, name=f"p{i}", columns=cols, row_id=ROW_ID), "eid", "ts", ("n",))
             for i, s in enumerate(sqls)]
    op = cores[0] if len(cores) == 1 else PatternSet(cores, tag="pattern")
    return drive(lambda: processor(op), rows, batches)


def run_floor(rows: pd.DataFrame, batches: int) -> float:
    """Seconds of :func:`drive` of the keyed-API floor (:func:`floor_processor`)."""
    return drive(floor_processor, rows, batches)[0]


def run_bare(sqls: list[str], rows: pd.DataFrame, batches: int) -> tuple[float, int]:
    """Seconds and matches of the bare matchers (one per pattern, ``advance_frame`` over
    every key at once) fed the rows in order at the steps of :func:`schedule` the operator
    feeds them (:func:`released`), under the same watermarks."""
    from moirae.patterns import Matcher, compile_pattern
    from moirae.patterns.spark_schema import ROW_ID

    cols = {"k": "string", "x": "double", "ts": "timestamp"}
    ms = [Matcher(compile_pattern(s, name=f"p{i}", columns=cols, row_id=ROW_ID)) for i, s in enumerate(sqls)]
    ts_ms = _ts_ms(rows)
    order = np.lexsort((rows[ROW_ID].to_numpy(), pd.DatetimeIndex(rows["ts"]).asi8))
    ordered = rows.iloc[order]
    parts, wms = schedule(ts_ms, batches)
    step = released(ts_ms, parts, wms)[order]
    steps = [np.flatnonzero(step == s) for s in range(len(wms))]
    states: list[dict] = [{} for _ in ms]
    n = 0
    t0 = time.perf_counter()
    for idx, wm in zip(steps, wms, strict=True):
        batch = ordered.iloc[idx]
        watermark = pd.Timestamp(wm, unit="ms", tz="UTC") if wm >= 0 else None
        for i, m in enumerate(ms):
            got, states[i] = m.advance_frame(states[i], batch, watermark=watermark)
            n += len(got)
    return time.perf_counter() - t0, n


def round_ratios(t_op: float, t_floor: float, t_bare: float) -> dict[str, float]:
    """One round's ratios of rows/s against the bare matcher: ``raw`` (the operator's),
    ``ceiling`` (the best any processor under the keyed API could reach: the bare
    matcher's work plus the floor) and ``own`` (the operator less the floor: its own
    work). An operator no slower than the floor has own work too small to time: a
    nanosecond is counted.

    >>> round_ratios(t_op=2.0, t_floor=0.6, t_bare=0.8)
    {'raw': 0.4, 'ceiling': 0.571, 'own': 0.571}
    >>> round_ratios(t_op=0.5, t_floor=0.6, t_bare=0.8)["own"] > 1e6
    True
    """
    return {"raw": round(t_bare / t_op, 3), "ceiling": round(t_bare / (t_bare + t_floor), 3),
            "own": round(t_bare / max(t_op - t_floor, 1e-9), 3)}


def _rounds(runs: dict[str, Callable[[], tuple[float, int]]], rounds: int) -> dict:
    """``rounds`` rounds of the operator, the floor and the bare matcher (each a call
    returning seconds and matches), in :func:`bench.harness.run_orders`' order: each
    one's seconds by round, the matches of each (last round), and each round's ratios."""
    secs: dict[str, list[float]] = {r: [] for r in RUNS}
    matches: dict[str, int] = {}
    for order in run_orders(RUNS, max(1, rounds)):
        for r in order:
            t, matches[r] = runs[r]()
            secs[r].append(t)
    by_round = [round_ratios(o, f, b) for o, f, b in zip(secs["operator"], secs["floor"], secs["bare"], strict=True)]
    out = {"seconds": {r: [round(t, 4) for t in ts] for r, ts in secs.items()},
           "matches": matches["operator"], "matches_bare": matches["bare"]}
    for k, many in (("raw", "ratios"), ("ceiling", "ceilings"), ("own", "owns")):
        out[many] = [x[k] for x in by_round]
    out["ratio"] = round(statistics.median(out["ratios"]), 3)
    out["ceiling"] = round(statistics.median(out["ceilings"]), 3)
    out["own"] = round(statistics.median(out["owns"]), 3)
    return out


def _point(rows: pd.DataFrame, sqls: list[str], batches: int, rounds: int) -> dict:
    work = len(rows) * len(sqls)
    got = _rounds({"operator": lambda: run_operator(sqls, rows, batches)[:2],
                   "floor": lambda: (run_floor(rows, batches), 0),
                   "bare": lambda: run_bare(sqls, rows, batches)}, rounds)
    med = {r: statistics.median(ts) for r, ts in got["seconds"].items()}
    return {"rows": len(rows), "batches": batches, "op_rows_per_s": round(work / med["operator"], 1),
            "floor_rows_per_s": round(work / med["floor"], 1), "bare_rows_per_s": round(work / med["bare"], 1), **got}


def _label(kind: str, x: dict) -> str:
    if kind == "patterns":
        return f"{x['patterns']} pattern{'s' if x['patterns'] != 1 else ''}, {x['rows']:,} rows"
    return f"{x['keys']:,} keys, {x['rows']:,} rows"


def _rounds_text(xs: list[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)


def targets(data: dict) -> list[dict]:
    """The run's targets: the operator's own work at every point, in every round (met
    only when every point's rounds all are; missed when one point's rounds all miss),
    the raw ratio reported beside it, the same matches as the bare matcher, and the
    state's growth with WITHIN.

    >>> def point(owns):
    ...     return {"patterns": 1, "rows": 10, "ratio": 0.4, "ratios": [0.4, 0.4], "ceiling": 0.6,
    ...             "own": min(owns), "owns": owns, "matches": 1, "matches_bare": 1}
    >>> state = [{"within_s": 10, "bytes_per_key": 100.0}, {"within_s": 300, "bytes_per_key": 300.0}]
    >>> [targets({"patterns": [point(a), point(b)], "keys": [], "state": state})[0]["met"]
    ...  for a, b in (([0.6, 0.7], [0.55, 0.9]), ([0.6, 0.7], [0.45, 0.9]), ([0.6, 0.7], [0.4, 0.45]))]
    [True, None, False]
    """
    pts = [(_label(kind, x), x) for kind in ("patterns", "keys") for x in data[kind]]
    per_point = [verdict(x["owns"], GOAL_RATIO) for _, x in pts]
    met = False if False in per_point else (True if all(v is True for v in per_point) else None)
    label, worst = min(pts, key=lambda p: p[1]["own"])
    note = "; ".join(f"{lbl}: {spread_note(x['owns'], GOAL_RATIO)}" for (lbl, x), v in zip(pts, per_point, strict=True)
                     if v is None)
    raw_label, raw = min(pts, key=lambda p: p[1]["ratio"])
    same = [lbl for lbl, x in pts if x["matches"] != x["matches_bare"]]
    s0, s1 = data["state"][0], data["state"][-1]
    growth = s1["bytes_per_key"] / max(s0["bytes_per_key"], 1.0)
    return [
        target("live pattern operator's own work (operator less the keyed-API floor measured in the same round) "
               "rows/s vs the bare matcher, every point", f">= {GOAL_RATIO}x in every round",
               f"worst {label}: {worst['own']}x (rounds {_rounds_text(worst['owns'])}); raw {worst['ratio']}x, "
               f"ceiling under the API {worst['ceiling']}x", met, note),
        target("raw: live pattern operator rows/s vs the bare matcher, Spark's per-key API cost included (worst point)",
               "reported", f"{raw_label}: {raw['ratio']}x (rounds {_rounds_text(raw['ratios'])}); the best any "
               f"processor could reach there: {raw['ceiling']}x", None),
        target("the operator and the bare matcher find the same matches, every point", "equal",
               "equal" if not same else f"differ at {', '.join(same)}", not same),
        target("state per key against WITHIN (300 s over 10 s)", "<= 30x (linear)", f"{growth:.1f}x",
               growth <= 30.0),
    ]


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a run."""
    quick = data.get("quick")
    cpus = (data.get("machine") or {}).get("cpus", os.cpu_count())
    head = ("| {0} | rows | operator rows/s | keyed-API floor rows/s | bare matcher rows/s | raw ratio (rounds) | "
            "ceiling | operator's own ratio (rounds) |")
    lines = [head.format("patterns"), "|---|---|---|---|---|---|---|---|"]

    def row(first, x) -> str:
        return (f"| {first} | {x['rows']} | {x['op_rows_per_s']} | {x['floor_rows_per_s']} | {x['bare_rows_per_s']} | "
                f"{x['ratio']} ({_rounds_text(x['ratios'])}) | {x['ceiling']} | "
                f"**{x['own']}** ({_rounds_text(x['owns'])}) |")

    lines += [row(x["patterns"], x) for x in data["patterns"]]
    lines += ["", head.format("keys"), "|---|---|---|---|---|---|---|---|"]
    lines += [row(x["keys"], x) for x in data["keys"]]
    lines += ["", "| WITHIN (s) | saved state per key (bytes) |", "|---|---|"]
    lines += [f"| {x['within_s']} | {x['bytes_per_key']} |" for x in data["state"]]
    t = targets(data)
    words = {True: "met", False: "missed", None: "unresolved"}
    return (
        f"## Pattern scale{' (quick)' if quick else ''}\n\n"
        f"`python -m bench scale{' --quick' if quick else ''}`: the live operator's code driven as Spark "
        "drives it, without a JVM (per micro-batch, per key: rows, then timers; state as bytes between batches; "
        "several patterns in one operator, as `Engine.pattern_queries` deploys them), against the bare matcher on "
        "the same rows, at the same micro-batches and watermarks (each row fed once the watermark passed it, as the "
        "operator feeds it), in the same run; pattern rows/s count each row once per pattern; with more than 4 "
        "patterns fewer keys are used, see the JSON. Spark's shuffle and state store are not in these figures. "
        f"Rounds per point: {data['rounds']} ({data['big_rounds']} at 50k keys and more), the three runs in an order "
        "that changes by round; figures are medians, ratios are computed per round from that round's own times.\n\n"
        "Also in each round, by the same driving loop: the **keyed-API floor**, a processor doing the least any "
        "stateful processor does under `transformWithStateInPandas` (reads its key's value, writes back a few bytes, "
        "outputs nothing, no timer). Its time is the API's cost, paid whatever the processor: the split of each "
        "batch into one frame per key (Spark's Python worker does it), one call per key, the key's state read and "
        "written as bytes. The bare matcher pays none of it, so no processor can reach its rate: *ceiling* = bare / "
        "(bare + floor) is the best one could. The target is judged on the operator's own work, *own* = bare / "
        f"(operator - floor) >= {GOAL_RATIO} at every point in every round; *raw* = bare / operator is kept beside "
        f"it. Own work: **{words[t[0]['met']]}** ({t[0]['measured']}); raw, worst point: {t[1]['measured']}.\n\n"
        f"Load average (1 minute): {data['load_avg_1m_before']} before, {data['load_avg_1m']} after, on {cpus} "
        "CPUs.\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the operator, floor and bare runs per point")
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
        data["patterns"].append({"patterns": p, **_point(sub, sqls, 4, args.rounds)})
        print(data["patterns"][-1], flush=True)
    for k in key_counts:
        rows = rows_for(k, 4 if k >= 50_000 or args.quick else per_key, seed=1)
        data["keys"].append({"keys": k, **_point(rows, [pattern_sql(0)], 2,
                                                 args.big_rounds if k >= 50_000 else args.rounds)})
        print(data["keys"][-1], flush=True)
    state_rows = rows_for(100 if not args.quick else 5, 60, seed=2)
    for w in (10, 60, 300):
        _t, _m, sizes = run_operator([pattern_sql(0, w).replace("x > 0", "x > -1")], state_rows, 3)
        data["state"].append({"within_s": w, "bytes_per_key": round(float(np.mean(sizes)), 1) if sizes else 0.0})
        print(data["state"][-1], flush=True)
    data["load_avg_1m"] = round(os.getloadavg()[0], 2)
    ts = targets(data)
    md = render(data)
    fig = None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3))
        for kind, ax in (("patterns", axes[0]), ("keys", axes[1])):
            xs = [x[kind] for x in data[kind]]
            ax.plot(xs, [x["op_rows_per_s"] for x in data[kind]], "o-", label="operator")
            ax.plot(xs, [x["bare_rows_per_s"] for x in data[kind]], "s--", label="bare matcher")
            ax.plot(xs, [x["floor_rows_per_s"] for x in data[kind]], "^:", label="keyed-API floor")
            ax.set_xlabel(kind)
        axes[0].set_ylabel("pattern-rows/s")
        axes[0].legend()
        axes[1].set_xscale("log")
        axes[2].plot([x["within_s"] for x in data["state"]], [x["bytes_per_key"] for x in data["state"]], "o-")
        axes[2].set_xlabel("WITHIN (s)")
        axes[2].set_ylabel("bytes per key")
    except ImportError:
        pass
    publish(name, data, md, fig, targets=ts)
    print(md)
    for t in ts:
        print(f"{t['what']}: {t['measured']} (target {t['target']}): {t['met']}" + (f" [{t['note']}]" if t["note"] else ""))
    return exit_code(ts)


if __name__ == "__main__":
    raise SystemExit(main())
