"""Recall time to first result as the archive grows (M 4.1, 4.3).

Four archived streams hold the same kind of history in the real Archiver, 1x, 2x, 5x
and 10x long (full run: 1M, 2M, 5M and 10M rows, chunks of 100k rows; quick: 100k to
1M rows, chunks of 10k). Events at the present are recalled one at a time through the
Recall Manager (stride scheduler, 4 concurrent history-queries, a per-chunk aggregate
template), *interleaved across the four sizes* (rounds of 1x, 2x, 5x, 10x in the balanced
orders of :func:`bench.harness.run_orders`), so that load from other processes on a shared
machine hits every size alike.
*Time to first result* is from just before ``submit`` to the first output (the newest
chunk's aggregate) reaching the sink; the rest of the task is then cancelled.

Baseline, in the same run and interleaved the same way: the same template as one query
over the whole stream (what a system without chunked recall answers first). Also
reported per size: the newest-chunk query alone (EXPLAIN ANALYZE: planning + execution)
to separate the database's share of the TTFR from the manager's.

Targets: median TTFR at 10x <= 1.3x the median at 1x (flat), and at 10M rows the first
result >= 10x faster than the whole-archive query.

Run: ``python -m bench recall_ttfr [--quick]`` (published as ``recall_ttfr_quick`` when
quick).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from bench.harness import exit_code, publish, run_orders, target
from bench.recall._common import (
    HOSTS,
    NOW,
    FirstChunkOperator,
    FirstOutputClock,
    archive,
    database,
    first_result,
    load_chunks,
)
from recall.manager import RecallManager

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/recall/recall_ttfr.py", "bench/recall/_common.py", "recall", "scheduler", "archive")

FACTORS = (1, 2, 5, 10)
FLAT_TARGET = 1.3
SPEEDUP_TARGET = 10.0


def stream(factor: int) -> str:
    return f"metrics_x{factor}"


def template(factor: int) -> str:
    return f"SELECT count(*) AS n, avg(v) AS m FROM {stream(factor)} WHERE host = :host"


def explain_newest(arch, db, factor: int, i: int) -> tuple[float, float]:
    """Planning and execution seconds of the newest-chunk history-query, outside the manager."""
    from archive.history import render

    text = render(template(factor), ((stream(factor), "ts"),))
    lo, hi = arch.grid.bounds(arch.grid.chunk_of(NOW - timedelta(seconds=1)))
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, {"host": f"h{i % HOSTS}", "__lo": lo, "__hi": hi})
        plan = cur.fetchone()[0][0]
    return plan["Planning Time"] / 1e3, plan["Execution Time"] / 1e3


def whole_archive(db, factor: int, i: int) -> float:
    with db.connection() as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(template(factor).replace(":host", "%s"), (f"h{i % HOSTS}",))
        cur.fetchall()
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    # multiples of 4, whole cycles of run_orders over the four sizes (its balance needs them)
    ap.add_argument("--events", type=int, default=32, help="events per size")
    ap.add_argument("--whole", type=int, default=8, help="whole-archive queries per size")
    args = ap.parse_args(argv)
    rows_per_chunk = 10_000 if args.quick else 100_000
    base_chunks = 10
    name = "recall_ttfr_quick" if args.quick else "recall_ttfr"

    db = database("ttfr")
    arch = archive(db, streams=[stream(f) for f in FACTORS])
    res = {f: {"ttfr": [], "submit": [], "plan": [], "exec": [], "whole": []} for f in FACTORS}
    load_s = {}
    try:
        for f in FACTORS:
            t = time.perf_counter()
            for back in range(0, base_chunks * f, 10):
                load_chunks(arch, back, min(10, base_chunks * f - back), rows_per_chunk, batch_id=back + 1,
                            seed=f, stream=stream(f))
            load_s[f] = time.perf_counter() - t
            print(f"loaded {stream(f)}: {base_chunks * f * rows_per_chunk:,} rows in {load_s[f]:.1f} s", flush=True)
        t = time.perf_counter()
        with db.connection() as conn, conn.cursor() as cur:
            # steady state: autovacuum of what was just bulk-loaded must not compete with the measurement
            cur.execute("VACUUM (ANALYZE)")
        vacuum_s = time.perf_counter() - t
        sink = FirstOutputClock()
        with RecallManager(arch, max_concurrent=4, on_output=sink, timeout_ms=600_000) as mgr:
            for f in FACTORS:
                mgr.register(FirstChunkOperator(arch, template(f), name=stream(f)))
            for f in FACTORS:  # warm-up, not counted
                first_result(mgr, sink, f"x{f}-10000", stream(f))
                first_result(mgr, sink, f"x{f}-10001", stream(f))
            for i, order in enumerate(run_orders(FACTORS, args.events)):
                for f in order:
                    ttfr, sub = first_result(mgr, sink, f"x{f}-{i}", stream(f))
                    res[f]["ttfr"].append(ttfr)
                    res[f]["submit"].append(sub)
                if i % 3 == 0:
                    for f in order:
                        p, e = explain_newest(arch, db, f, i)
                        res[f]["plan"].append(p)
                        res[f]["exec"].append(e)
        for i, order in enumerate(run_orders(FACTORS, args.whole)):
            for f in order:
                res[f]["whole"].append(whole_archive(db, f, i))
    finally:
        arch.close()
        db.drop_schema()

    points = []
    for f in FACTORS:
        r = res[f]
        p = {"factor": f, "rows": base_chunks * f * rows_per_chunk, "chunks": base_chunks * f,
             "load_seconds": load_s[f], "ttfr_seconds": r["ttfr"], "ttfr_median": statistics.median(r["ttfr"]),
             "submit_median": statistics.median(r["submit"]), "newest_plan_median": statistics.median(r["plan"]),
             "newest_exec_median": statistics.median(r["exec"]), "whole_seconds": r["whole"],
             "whole_median": statistics.median(r["whole"])}
        p["speedup"] = p["whole_median"] / p["ttfr_median"]
        points.append(p)
        print(f"{p['rows']:>11,} rows ({p['chunks']} chunks): median TTFR {p['ttfr_median'] * 1e3:7.1f} ms "
              f"(submit {p['submit_median'] * 1e3:.1f} ms; newest chunk alone: plan "
              f"{p['newest_plan_median'] * 1e3:.1f} + run {p['newest_exec_median'] * 1e3:.1f} ms), "
              f"whole-archive query {p['whole_median'] * 1e3:8.1f} ms, speedup {p['speedup']:.1f}x", flush=True)

    first, last = points[0], points[-1]
    growth = last["ttfr_median"] / first["ttfr_median"]
    flat_ok = growth <= FLAT_TARGET
    fast_ok = last["speedup"] >= SPEEDUP_TARGET
    big_enough = last["rows"] >= 10_000_000
    verdict = "met" if flat_ok and fast_ok and big_enough else "MISSED"
    print(f"TTFR growth 10x archive: {growth:.2f} (target <= {FLAT_TARGET}); speedup at {last['rows']:,} rows: "
          f"{last['speedup']:.1f}x (target >= {SPEEDUP_TARGET:.0f}x): {verdict}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = [p["rows"] for p in points]
    ax.plot(xs, [p["ttfr_median"] * 1e3 for p in points], "o-", label="recall: first result (median)")
    ax.plot(xs, [p["newest_exec_median"] * 1e3 for p in points], "^:", label="newest-chunk query alone (run)")
    ax.plot(xs, [p["whole_median"] * 1e3 for p in points], "s--", label="one query over the whole archive")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("archive rows (one stream)")
    ax.set_ylabel("ms (log)")
    ax.legend()
    ax.grid(alpha=0.3)

    md = (
        f"### Recall time to first result against archive size{' (quick)' if args.quick else ''}\n\n"
        f"Four streams in the real Archiver, {FACTORS[0]}x to {FACTORS[-1]}x long ({first['rows']:,} to "
        f"{last['rows']:,} rows, {rows_per_chunk:,} rows a chunk); {args.events} events per size, one at a "
        "time, interleaved across sizes, through the Recall Manager (4 concurrent history-queries). "
        "Baseline: the same template as one query over the whole stream, same run, interleaved too.\n\n"
        "| rows | chunks | median TTFR (ms) | newest-chunk query alone: plan + run (ms) | "
        "whole-archive query (ms) | speedup |\n|---|---|---|---|---|---|\n"
        + "".join(f"| {p['rows']:,} | {p['chunks']} | {p['ttfr_median'] * 1e3:.1f} | "
                  f"{p['newest_plan_median'] * 1e3:.1f} + {p['newest_exec_median'] * 1e3:.1f} | "
                  f"{p['whole_median'] * 1e3:.1f} | {p['speedup']:.1f}x |\n" for p in points)
        + f"\nTTFR at {FACTORS[-1]}x / at 1x = **{growth:.2f}** (target <= {FLAT_TARGET}); first result "
        f"**{last['speedup']:.1f}x** faster than the whole-archive query at {last['rows']:,} rows "
        f"(target >= {SPEEDUP_TARGET:.0f}x at >= 10M rows): **{verdict}**"
        + ("" if big_enough else " (quick size: below the 10M rows the target is stated for)") + ".\n"
    )
    data = {"rows_per_chunk": rows_per_chunk, "events_per_size": args.events, "growth": growth,
            "vacuum_seconds": vacuum_s, "flat_target": FLAT_TARGET, "speedup_target": SPEEDUP_TARGET,
            "verdict": verdict, "points": points}
    publish(name, data, md, fig, targets=targets(data))
    return exit_code(targets(data))


def targets(data: dict) -> list[dict]:
    """Targets: TTFR flat as the archive grows 10x; >= 10x faster than the whole-archive query."""
    first, last = data["points"][0], data["points"][-1]
    small = last["rows"] < 10_000_000
    return [target(f"recall time to first result, archive {first['rows']:,} -> {last['rows']:,} rows",
                   f"<= {data['flat_target']}x", f"{data['growth']:.2f}x", data["growth"] <= data["flat_target"]),
            target(f"recall first result vs one query over the whole archive ({last['rows']:,} rows)",
                   f">= {data['speedup_target']:.0f}x faster at 10M rows", f"{last['speedup']:.1f}x",
                   None if small else last["speedup"] >= data["speedup_target"],
                   "below the 10M rows the target is stated for" if small else "")]


if __name__ == "__main__":
    raise SystemExit(main())
