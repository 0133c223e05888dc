"""Bursts at capacity: does the full engine keep its pace when offered more than it can
take, once each micro-batch is bounded by its source's admission control?

The setup is :mod:`bench.engine.engine_jvm`'s: Spark's JVM ``rate`` source shaped like
the metrics stream (``ts``, ``sid = value % 1000``, ``bw``), the 5 s tumbling average
per ``sid`` with a filter, a context-query over ``users``, one Recall and one Similarity
Recall (the ``full`` configuration), ``local[2]``, trigger 2 s, each run ``--seconds``
(60) long.

First the sustainable rate ``S`` is found in this run (:func:`find_sustainable`): the
full engine on the plain ``rate`` source is probed for ``--probe-seconds`` at a rate,
doubled or halved until one rate keeps up and one does not, and the bracket bisected
(:func:`bench.engine.engine_jvm.bisect`) to within ``RESOLUTION``. A probe *keeps up*
(:func:`keeps_up`) when it completes at least 80 % of the triggers its time allows, its
p90 batch time is within 90 % of the trigger (``HEADROOM``: a rate at the edge of the
trigger falls behind over a longer run), and no batch holds more than 1.5 triggers of
the offered rows (a batch growing with a backlog). The rate found is then run for a
whole run's length and stepped down by 10 % until it keeps up that long
(:func:`confirm`): that rate is ``S``. ``--rate`` skips the search.

Then, interleaved over ``--rounds``:

- ``sustainable``: the full engine offered ``S`` rows/s through the plain ``rate`` source;
- ``burst_bounded``: offered ``4 S``, each micro-batch bounded to one trigger of the
  offered rows (``4 S x trigger``): Spark's ``rate-micro-batch`` source (``rowsPerBatch``,
  the ``rate`` source kind's ``rowsPerBatch`` option), event time following the offered
  rate (``ts = value / 4S``). At 4 S the backlog never runs dry, so a bounded rate source
  admits exactly ``rowsPerBatch`` rows each batch: the same rows, in the same order, with
  the same times. (A bound of ``S x trigger`` would cap the burst at ``S`` by construction:
  a processing-time trigger waits for its next tick even with a backlog, so batches that
  take less than the trigger leave the engine idle);
- ``burst_unbounded`` (not with ``--quick``): offered ``4 S`` through the plain ``rate``
  source, nothing bounding a batch (each batch takes the whole backlog: the spiral);
- ``archive``: archive only (no event-query), offered ``4 S``, each batch bounded to
  what is offered in one trigger (``4 S x trigger`` rows): it archives all of ``4 S``
  if it can, else as much as the sink takes (its ceiling on the same rows).

Rows processed = input rows of the batches each query completed within the run's
``--seconds``, counted from the end of its first batch with rows (start-up, the same for
every run, is left out) and, for the runs on the plain source offered what the engine
should take (``sustainable`` and the search's probes), once it has also caught up with
the rows offered during start-up (:func:`caught_up`); for the engine, the fewest over its queries that read
``metrics`` (the archive's and the event-query's). Each run records the load average at
its start and where the machine's CPU went (:class:`bench.cpu_share.CpuShare`; ``other``
is processes not of this run: the machine is shared). Targets: ``burst_bounded`` >= 0.8 x
``sustainable`` and >= 0.5 x ``archive``, in every round.

Run: ``python -m bench bursts [--quick] [--rate ROWS_PER_S] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil

from bench.cpu_share import CpuShare, postmaster_of
from bench.engine.engine_e2e import STOP_GRACE_S, Bench, pct
from bench.engine.engine_jvm import HOT, KEYS, USERS_SQL, bisect, overload, rate_users
from bench.harness import RESULTS, exit_code, publish, run_orders, target, verdict
from moirae.runtime.graceful_stop import stop_between_batches

MEASURES = ("bench/engine/bursts.py", "bench/engine/engine_jvm.py", "moirae", "archive", "recall", "similarity",
            "ananke")
TRIGGER_S = 2.0
RUNS = ("sustainable", "burst_bounded", "burst_unbounded", "archive")
OVER = 4  # the burst: offered rate over the sustainable one
START_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 60.0  # a run offered what it should take must catch up with start-up's backlog within this
RESOLUTION = 1.25  # the sustainable rate's bracket: its ends within 25 % of each other
MAX_STEPS = 4  # doublings or halvings looking for the bracket's other end
HEADROOM = 0.9  # a search probe keeps up only with its p90 batch within 90 % of the trigger
CONFIRM_STEP, CONFIRM_STEPS = 0.9, 3  # the found rate run for a whole run's length, stepped down until it holds


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


def plan(run: str, rate: int) -> tuple[int, int | None]:
    """(offered rows/s, rows per batch at most or None) of ``run`` at sustainable rate ``rate``.

    >>> [plan(r, 100) for r in RUNS]
    [(100, None), (400, 800), (400, None), (400, 800)]
    """
    offered = rate if run == "sustainable" else OVER * rate
    bound = int(offered * TRIGGER_S) if run in ("burst_bounded", "archive") else None
    return offered, bound


def start_engine(b: Bench, run: str, offered: int, bound: int | None):
    from datetime import timedelta

    full = run != "archive"
    e = b.engine(run, spark={"trigger": f"{int(TRIGGER_S * 1000)}ms"}, ananke={"enabled": full})
    base_us = time.time_ns() // 1000
    e.source("metrics", metrics_df(e.spark, offered, base_us, bound), ts="ts", lateness="2 seconds",
             indexes=[("sid",)])
    e.source("users", rate_users(e.spark, base_us), ts="ts", lateness="2 seconds", indexes=[("sid",)])
    if full:
        e.event_query("overload", overload, inputs=["metrics"])
        e.recall("overload", "SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n FROM metrics h "
                 "WHERE h.sid = :sid GROUP BY h.sid", name="norm", period=timedelta(minutes=10), time_column="h.ts")
        e.context_query("overload", USERS_SQL, name="users", window="10s")
        e.similarity_recall("overload", k=3, name="similar")
    e.start()
    return e


def metrics_queries(e) -> list:
    """The engine's streaming queries that read ``metrics``: the source's own (archive
    only) or, when an event-query archives it in its read (archive.shared), the event-query's."""
    src = e.sources.by_name["metrics"].query
    return [q for q in [src, *(f.streaming for f in e.deploy.flows.values())] if q is not None]


def caught_up(q, after: int, offered: int) -> int | None:
    """The id of ``q``'s first batch after ``after`` that held at most 1.5 triggers of the
    ``offered`` rows (the query no longer taking a backlog), or None yet.

    >>> class Q:
    ...     recentProgress = [{"batchId": b, "numInputRows": n} for b, n in ((1, 900), (2, 500), (3, 250))]
    >>> caught_up(Q, 1, 100), caught_up(Q, 3, 100), caught_up(Q, 1, 50)
    (3, None, None)
    """
    return next((p["batchId"] for p in q.recentProgress if p["batchId"] > after
                 and p.get("numInputRows") is not None and p["numInputRows"] <= 1.5 * offered * TRIGGER_S), None)


def measure(b: Bench, run: str, offered: int, bound: int | None, seconds: float, settle: bool = False) -> dict:
    """One run: the engine started, its queries' batches completed within ``seconds``
    after each completed one with rows, the load average and the CPU by process.

    With ``settle`` (a run offered what it should keep up with) the clock starts only
    once every query has also caught up with the start-up's backlog (:func:`caught_up`:
    the rows offered while the first batch with rows ran, JIT and Python workers still
    warming, come in the next batches); a run that has not within ``SETTLE_TIMEOUT_S``
    is reported as such (``settled`` False) without being measured."""
    load = [round(x, 2) for x in psutil.getloadavg()]
    e = start_engine(b, run, offered, bound)
    qs: list = []
    cpu = None
    try:
        qs = metrics_queries(e)
        if not qs:
            raise RuntimeError(f"{run}: no streaming query reads metrics (sources: {sorted(e.sources.by_name)})")

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
        settled = True
        if settle:
            since = time.monotonic()
            while (got := {q.id: caught_up(q, first[q.id], offered) for q in qs}) and None in got.values():
                check()
                if time.monotonic() - since > SETTLE_TIMEOUT_S:
                    settled = False
                    break
                time.sleep(0.2)
            if settled:
                first = got
        if not settled:
            seconds = 0.0
        cpu = CpuShare(own=True, postmaster=postmaster_of(b.dsn)).start()  # this run's processes only
        t0 = time.monotonic()
        while time.monotonic() < t0 + seconds:
            check()
            time.sleep(0.5)
        used, cpu = cpu.stop(), None
        per_query = {}
        for q in qs:
            ps = [p for p in q.recentProgress if p.get("numInputRows") is not None and p["batchId"] > first[q.id]]
            dur = [p["durationMs"].get("triggerExecution", 0) for p in ps]
            rows = [batch_rows(p) for p in ps]
            per_query[q.name or str(q.id)] = {
                "rows": sum(rows), "batches": len(ps), "max_batch_rows": max(rows, default=0),
                "median_ms": pct(dur, 50), "p90_ms": pct(dur, 90), "last_ms": dur[-1] if dur else None,
                "ms_per_1k_rows": round(sum(dur) / max(1, sum(rows)) * 1000, 3) if rows else None}
    finally:
        if cpu is not None:
            cpu.stop()
        e.close()
        for q in qs:
            if q.isActive:
                stop_between_batches(q, STOP_GRACE_S)
        b.drop_schemas()
    processed = min(x["rows"] for x in per_query.values())
    if not settled:
        print(f"{run:>16} offered {offered:>9,} rows/s: did not catch up with start-up's backlog within "
              f"{SETTLE_TIMEOUT_S:g} s (load {load[0]})", flush=True)
    print(f"{run:>16} offered {offered:>9,} rows/s (bound {bound or '-'}; load {load[0]}): {processed:,} rows in "
          f"{seconds:.0f} s; " + "; ".join(f"{n}: {x['batches']} batches, max {x['max_batch_rows']:,} rows, "
                                           f"median {x['median_ms']} ms" for n, x in per_query.items()), flush=True)
    return {"run": run, "offered": offered, "bound": bound, "seconds": seconds, "processed": processed,
            "queries": per_query, "load_avg": load, "cpu": used, "settled": settled}


def batch_rows(p: dict) -> int:
    """Rows batch progress ``p`` took from its source: for ``rate-micro-batch`` from its
    offsets, which count rows, since ``numInputRows`` counts a source as often as the batch
    reads it (the archive sink reads a batch twice while the stream's chunk interval is
    not final: one aggregate, then the write), else ``numInputRows``.

    >>> src = {"description": "RatePerMicroBatchStream[rowsPerBatch=50]", "startOffset": '{"offset": 50}',
    ...        "endOffset": '{"offset": 100, "timestamp": 2000}'}
    >>> batch_rows({"numInputRows": 100, "sources": [src]}), batch_rows({"numInputRows": 100, "sources": [
    ...     {**src, "startOffset": "null"}]}), batch_rows({"numInputRows": 7, "sources": [{"description": "Rate"}]})
    (50, 100, 7)
    """
    for src in p.get("sources") or ():
        if str(src.get("description", "")).startswith("RatePerMicroBatchStream"):
            start, end = (json.loads(x) if isinstance(x, str) else x
                          for x in (src.get("startOffset"), src.get("endOffset")))
            if end is not None:
                return int(end["offset"]) - (int(start["offset"]) if start else 0)
    return int(p["numInputRows"])


def keeps_up(r: dict, headroom: float = 1.0) -> bool:
    """Whether a run kept up with its offered rate (module doc): every query completed
    at least 80 % of the triggers its time allows, with p90 batch time within
    ``headroom`` of the trigger and no batch over 1.5 triggers of the offered rows.

    >>> q = {"batches": 10, "p90_ms": 1900, "max_batch_rows": 300}
    >>> keeps_up({"offered": 100, "seconds": 20, "queries": {"a": q}})
    True
    >>> keeps_up({"offered": 100, "seconds": 20, "queries": {"a": q}}, headroom=HEADROOM)  # 1.9 s of 2: no margin
    False
    >>> keeps_up({"offered": 100, "seconds": 20, "queries": {"a": {**q, "max_batch_rows": 900}}})
    False
    >>> keeps_up({"offered": 100, "seconds": 20, "queries": {"a": {**q, "batches": 3, "p90_ms": None}}})
    False
    """
    if not r.get("settled", True) or not r["seconds"]:
        return False
    expected = r["seconds"] / TRIGGER_S
    return all(x["batches"] >= 0.8 * expected - 1 and x["p90_ms"] is not None
               and x["p90_ms"] <= headroom * TRIGGER_S * 1000
               and x["max_batch_rows"] <= 1.5 * r["offered"] * TRIGGER_S for x in r["queries"].values())


def confirm(run, rate: int, steps: int = CONFIRM_STEPS, step: float = CONFIRM_STEP) -> dict:
    """The rate the sustainable run holds for a whole run's length: ``run(rate)`` (a
    :func:`measure` result with ``sustained``), stepped down by ``step`` until it
    holds, at most ``steps`` times. A search probe is shorter than a run, and a rate
    at the probe's edge can fall behind over a run's length (a chunk filling, the
    load changing); the rounds' baseline must not. ``rate`` is 0 if no step held.

    >>> c = confirm(lambda rate: {"rate": rate, "sustained": rate <= 85}, 100)
    >>> c["rate"], [r["rate"] for r in c["runs"]]
    (81, [100, 90, 81])
    >>> confirm(lambda rate: {"rate": rate, "sustained": False}, 100, steps=1)["rate"]
    0
    """
    runs = []
    for _ in range(steps + 1):
        runs.append(run(rate))
        if runs[-1]["sustained"]:
            return {"rate": rate, "runs": runs}
        rate = int(rate * step)
    return {"rate": 0, "runs": runs}


def find_sustainable(probe, start: int, resolution: float = RESOLUTION, steps: int = MAX_STEPS) -> dict:
    """The highest rate ``probe(rate) -> measure result`` keeps up with: from ``start``,
    doubled or halved (at most ``steps`` times) until one rate keeps up and one does not,
    the bracket then bisected to within ``resolution``. ``sustained_rows_per_s`` is 0 if
    no rate kept up, and the highest probed (``capped``) if every one did.

    >>> fake = lambda rate: {"rate": rate, "sustained": rate <= 300}
    >>> c = find_sustainable(fake, 100)
    >>> c["sustained_rows_per_s"], c["bracket"], [r["rate"] for r in c["runs"]]
    (283, [283, 336], [100, 200, 400, 283, 336])
    >>> [r["rate"] for r in find_sustainable(fake, 1000)["runs"]]
    [1000, 500, 250, 354, 297]
    """
    runs = [probe(start)]
    lo = hi = None
    if runs[0]["sustained"]:
        lo = start
        for _ in range(steps):
            runs.append(probe(lo * 2))
            if not runs[-1]["sustained"]:
                hi = lo * 2
                break
            lo *= 2
    else:
        hi = start
        for _ in range(steps):
            runs.append(probe(hi // 2))
            if runs[-1]["sustained"]:
                lo = hi // 2
                break
            hi //= 2
    cap = {"runs": runs, "bracket": [lo or 0, hi], "capped": hi is None, "sustained_rows_per_s": lo or 0}
    if lo and hi:
        bisect(cap, probe, resolution)
    return cap


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
    """Bounded burst >= 0.8x sustainable and >= 0.5x archive-only, in every round; the
    sustainable run must have kept up (else it is no baseline)."""
    r = data["ratios"]
    behind = [i + 1 for i, x in enumerate(data["rounds"]) if not x["sustainable"]["kept_up"]]

    def one(what: str, xs: list, goal: float, note_if_behind: bool) -> dict:
        shown = ", ".join("-" if x is None else f"{x:.2f}" for x in xs)
        if None in xs:  # a baseline completed no batch within the span: nothing to compare
            return target(what, f">= {goal}x", shown, None, "a baseline completed no batch within the run")
        if note_if_behind and behind:
            return target(what, f">= {goal}x", shown, None,
                          f"the sustainable run fell behind in round(s) {behind}: no baseline")
        return target(what, f">= {goal}x", shown, verdict(xs, goal, exact=len(xs) == 1))

    return [one("bursts: full engine at 4x its sustainable rate, batches bounded, rows in the run vs. at "
                "the sustainable rate", r["over_sustainable"], 0.8, True),
            one("bursts: the same vs. archive-only offered 4x", r["over_archive"], 0.5, False)]


def _cell(x: dict, key: str) -> str:
    return "/".join(str(v[key]) for v in x["queries"].values())


def markdown(data: dict) -> str:
    s, search = data["rate"], data.get("search")
    if search:
        tried = ", ".join(f"{r['rate'] / 1000:g}k (load {r['load_avg'][0]}) {'✓' if r['sustained'] else '✗'}"
                          for r in search["runs"])
        how = (f"found in this run: probes of {data['probe_seconds']:g} s on the plain rate source, "
               f"{tried}; bracket {search['bracket'][0]:,} - {search['bracket'][1] or '-'} (a probe keeps up with "
               f"its p90 batch within {HEADROOM:g} of the trigger)")
        conf = data.get("confirm")
        if conf:
            how += ("; then run for a whole run's length: " + ", ".join(
                f"{r['rate'] / 1000:g}k (load {r['load_avg'][0]}) {'✓' if r['sustained'] else '✗'}"
                for r in conf["runs"]))
    else:
        how = "given (`--rate`), not searched"
    lines = [f"## Bursts at capacity (`bench/engine/bursts.py`{' --quick' if data['quick'] else ''})", "",
             f"Spark's JVM rate source (ts, sid = value % 1000, bw), 5 s tumbling average per sid with a filter, "
             f"a context-query, one Recall and one Similarity Recall, `local[2]`, trigger {TRIGGER_S:g} s, "
             f"{data['seconds']:g} s per run. Sustainable rate S = {s:,} rows/s, {how}. Burst = {OVER} S; the "
             f"bounded burst's source (`rate-micro-batch`) admits one trigger of the offered rows, {OVER} S x "
             f"trigger = {int(OVER * s * TRIGGER_S):,} rows per micro-batch, as archive-only's does. "
             f"Load average at the start {data['load_avg']}; the machine is shared (2 cores, other sessions' "
             "processes run beside; the `other` column is their CPU).", "",
             "| round | run | load (1 min) | offered rows/s | bound | rows processed | batches | largest batch | "
             "median / p90 batch ms | ms per 1k rows | CPU s: jvm / pg / py workers / driver / other |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(data["rounds"]):
        for name in RUNS:
            x = r.get(name)
            if x is None:
                continue
            c = x.get("cpu") or {}
            cpu = " / ".join(str(c.get(k, "-")) for k in ("jvm", "postgres", "python_workers", "driver", "other"))
            kept = "" if name != "sustainable" else (" (kept up)" if x["kept_up"] else " (**fell behind**)")
            lines.append(f"| {i + 1} | {name}{kept} | {x['load_avg'][0]} | {x['offered']:,} | "
                         f"{'-' if x['bound'] is None else format(x['bound'], ',')} | {x['processed']:,} | "
                         f"{_cell(x, 'batches')} | {max(v['max_batch_rows'] for v in x['queries'].values()):,} | "
                         f"{_cell(x, 'median_ms')} / {_cell(x, 'p90_ms')} | {_cell(x, 'ms_per_1k_rows')} | {cpu} |")
    r = data["ratios"]
    lines += ["", f"Bounded burst / sustainable by round: {', '.join(map(str, r['over_sustainable']))} "
                  f"(target >= 0.8); bounded burst / archive-only: {', '.join(map(str, r['over_archive']))} "
                  "(target >= 0.5)."]
    for t in data["targets"]:
        note = f" ({t['note']})" if t.get("note") else ""
        lines.append(f"- {t['what']}: {t['measured']} ({t['target']}): "
                     f"**{ {True: 'met', False: 'missed', None: 'unresolved'}[t['met']] }**{note}.")
    return "\n".join(lines)


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, cx) = plt.subplots(1, 2, figsize=(10, 3.5))
    names = [n for n in RUNS if any(n in r for r in data["rounds"])]
    width = 0.8 / len(data["rounds"])
    for i, r in enumerate(data["rounds"]):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [r[n]["processed"] / 1e6 if n in r else 0 for n in names], width=width, label=f"round {i + 1}")
        cx.bar(xs, [max((q["ms_per_1k_rows"] or 0) for q in r[n]["queries"].values()) if n in r else 0
                    for n in names], width=width, label=f"round {i + 1}")
    for a, label in ((ax, f"million rows in {data['seconds']:g} s"), (cx, "batch ms per 1k rows")):
        a.set_xticks(range(len(names)), names, rotation=15)
        a.set_ylabel(label)
    ax.legend()
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 20 s runs, no unbounded burst")
    ap.add_argument("--rate", type=int, default=None, help="the sustainable rate S (default: searched in this run)")
    ap.add_argument("--start", type=int, default=None,
                    help="the search's first rate (default 0.5 x engine_jvm's last full-engine capacity)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per run (default 60; quick 20)")
    ap.add_argument("--probe-seconds", type=float, default=None, help="seconds per search probe (default 30; quick 16)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 2; quick 1)")
    args = ap.parse_args(argv)
    seconds = args.seconds or (20.0 if args.quick else 60.0)
    probe_s = args.probe_seconds or (16.0 if args.quick else 30.0)
    rounds = args.rounds or (1 if args.quick else 2)
    start = args.start
    if start is None and args.rate is None:
        prev = RESULTS / "engine_jvm.json"
        cap = json.loads(prev.read_text())["capacity"]["full"]["sustained_rows_per_s"] if prev.exists() else 0
        start = int(0.5 * cap) or 100_000
    runs = [r for r in RUNS if not (args.quick and r == "burst_unbounded")]
    from moirae.runtime.spark import spark_session

    spark_session()
    data: dict = {"quick": args.quick, "seconds": seconds, "probe_seconds": probe_s, "trigger_s": TRIGGER_S,
                  "load_avg": [round(x, 2) for x in psutil.getloadavg()], "rounds": []}
    with tempfile.TemporaryDirectory(prefix="moirae-bursts-") as d:
        b = Bench(Path(d))

        def probe(rate: int, seconds: float = probe_s, headroom: float = HEADROOM) -> dict:
            r = measure(b, "sustainable", rate, None, seconds, settle=True)
            r["rate"], r["sustained"] = rate, keeps_up(r, headroom)
            print(f"{'':>16} {rate:,} rows/s for {seconds:g} s: {'keeps up' if r['sustained'] else 'behind'}",
                  flush=True)
            return r

        try:
            measure(b, "sustainable", start or args.rate, None, 5.0)  # JIT, Python workers: discarded
            if args.rate is None:
                data["search"] = find_sustainable(probe, start)
                found = data["search"]["sustained_rows_per_s"]
                if not found:
                    raise SystemExit(f"bursts: no rate from {start:,} down kept up; nothing to measure")
                data["confirm"] = confirm(lambda rate: probe(rate, seconds, 1.0), found)
                data["rate"] = data["confirm"]["rate"]
                if not data["rate"]:
                    raise SystemExit(f"bursts: {found:,} rows/s and the steps below it fell behind over "
                                     f"{seconds:g} s; nothing to measure")
            else:
                data["rate"] = args.rate
            for order in run_orders(runs, rounds):
                one = {}
                for name in order:
                    one[name] = measure(b, name, *plan(name, data["rate"]), seconds, settle=name == "sustainable")
                one["sustainable"]["kept_up"] = keeps_up(one["sustainable"])
                data["rounds"].append(one)
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
