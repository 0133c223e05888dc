"""Recall time to first result as the archive grows (DESIGN.md §7; M 4.1, 4.3).

An archive of ``metrics`` in the real Archiver grows 1x -> 2x -> 5x -> 10x (full run:
1M -> 10M rows, chunks of 100k rows; the archive grows into the past, as history does).
At each size, events at the present are recalled one after another through the Recall
Manager (stride scheduler, 4 concurrent history-queries, a per-chunk aggregate
template): *time to first result* is from just before ``submit`` to the first output
(the newest chunk's aggregate) reaching the sink; the rest of the task is then
cancelled. The baseline, measured in the same run at each size, is the same template
run once over the whole archive (what a system without chunked recall answers first).

Targets: median TTFR at 10x <= 1.3x the median at 1x (flat), and at 10M rows the first
result >= 10x faster than the whole-archive query.

Run: ``python -m bench.recall_ttfr [--quick]`` (quick: 100k -> 1M rows, chunks of 10k;
published as ``recall_ttfr_quick``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from bench._recall_common import (
    HOSTS,
    NOW,
    QUERY,
    FirstChunkOperator,
    FirstOutputClock,
    archive,
    database,
    load_chunks,
)
from bench.report import publish
from recall.manager import RecallManager

FACTORS = (1, 2, 5, 10)
FLAT_TARGET = 1.3
SPEEDUP_TARGET = 10.0
WHOLE = "SELECT count(*) AS n, avg(v) AS m FROM metrics WHERE host = %s"


def recall_ttfr(arch, n_events: int, tag: str) -> tuple[list[float], list[float]]:
    """TTFR of ``n_events`` events one at a time, and the time each ``submit`` call took
    (reading the chunk catalog), both in seconds."""
    sink = FirstOutputClock()
    out, submits = [], []
    with RecallManager(arch, max_concurrent=4, on_output=sink, timeout_ms=600_000) as mgr:
        mgr.register(FirstChunkOperator(arch))
        for i in range(n_events + 2):  # two warm-up events, not counted
            eid = f"{tag}-{i}"
            ev = {"eid": eid, "ts": NOW - timedelta(seconds=i + 1), "host": f"h{i % HOSTS}"}
            t0 = time.perf_counter()
            mgr.submit(ev, "ttfr")
            t_submit = time.perf_counter() - t0
            if not sink.wait_all([eid], 120) or eid not in sink.first:
                failed = [v.error for v in mgr.tasks(eid) if v.error]
                raise RuntimeError(f"event {eid} got no first result: {failed or 'timeout after 120 s'}")
            if i >= 2:
                out.append(sink.first[eid] - t0)
                submits.append(t_submit)
            if eid in mgr.open_events():
                mgr.cancel(eid)
    return out, submits


def newest_chunk_explain(arch, db, repeats: int) -> dict:
    """EXPLAIN ANALYZE of the first history-query (the newest chunk), outside the
    manager: planning and execution times and buffers read from outside shared memory,
    to tell the database's share of the TTFR from the manager's."""
    from archive.history import render

    query = arch.prepare(QUERY)
    text = render(query.template, (("metrics", "ts"),))
    chunk = arch.grid.chunk_of(NOW - timedelta(seconds=1))
    lo, hi = arch.grid.bounds(chunk)
    plans, execs, reads = [], [], []
    with db.connection() as conn, conn.cursor() as cur:
        for i in range(repeats):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text,
                        {"host": f"h{i % HOSTS}", "__lo": lo, "__hi": hi})
            plan = cur.fetchone()[0][0]
            plans.append(plan["Planning Time"] / 1e3)
            execs.append(plan["Execution Time"] / 1e3)
            reads.append(plan["Plan"].get("Shared Read Blocks", 0))
    return {"planning_median": statistics.median(plans), "execution_median": statistics.median(execs),
            "shared_read_blocks": reads}


def whole_archive(db, repeats: int) -> list[float]:
    times = []
    with db.connection() as conn, conn.cursor() as cur:
        for i in range(repeats):
            t0 = time.perf_counter()
            cur.execute(WHOLE, (f"h{i % HOSTS}",))
            cur.fetchall()
            times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    ap.add_argument("--events", type=int, default=25)
    args = ap.parse_args(argv)
    rows_per_chunk = 10_000 if args.quick else 100_000
    base_chunks = 10
    name = "recall_ttfr_quick" if args.quick else "recall_ttfr"

    db = database("ttfr")
    arch = archive(db)
    points = []
    try:
        loaded = 0
        for factor in FACTORS:
            target = base_chunks * factor
            t = time.perf_counter()
            while loaded < target:
                step = min(10, target - loaded)
                load_chunks(arch, loaded, step, rows_per_chunk, batch_id=loaded + 1)
                loaded += step
            load_s = time.perf_counter() - t
            # steady state: vacuum and analyze now, so autovacuum of the rows just bulk-loaded
            # does not compete with the measurement (an archive is not loaded in one go)
            t = time.perf_counter()
            with db.connection() as conn, conn.cursor() as cur:
                cur.execute("VACUUM (ANALYZE) metrics")
            vacuum_s = time.perf_counter() - t
            ttfr, submit_s = recall_ttfr(arch, args.events, f"x{factor}")
            explain = newest_chunk_explain(arch, db, 9)
            whole = whole_archive(db, 3)
            p = {"factor": factor, "rows": loaded * rows_per_chunk, "chunks": loaded, "load_seconds": load_s,
                 "vacuum_seconds": vacuum_s, "submit_seconds": submit_s, "newest_chunk_query": explain,
                 "ttfr_seconds": ttfr, "ttfr_median": statistics.median(ttfr),
                 "whole_seconds": whole, "whole_median": statistics.median(whole)}
            p["speedup"] = p["whole_median"] / p["ttfr_median"]
            points.append(p)
            print(f"{p['rows']:>11,} rows ({loaded} chunks): median TTFR {p['ttfr_median'] * 1e3:7.1f} ms, "
                  f"whole-archive query {p['whole_median'] * 1e3:8.1f} ms, speedup {p['speedup']:.1f}x "
                  f"(submit {statistics.median(submit_s) * 1e3:.1f} ms; newest chunk alone: plan "
                  f"{explain['planning_median'] * 1e3:.1f} ms + run {explain['execution_median'] * 1e3:.1f} ms; load {load_s:.1f} s, vacuum {vacuum_s:.1f} s)",
                  flush=True)
    finally:
        arch.close()
        db.drop_schema()

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
    ax.plot(xs, [p["whole_median"] * 1e3 for p in points], "s--", label="one query over the whole archive")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("archive rows")
    ax.set_ylabel("ms (log)")
    ax.legend()
    ax.grid(alpha=0.3)

    md = (
        f"### Recall time to first result against archive size{' (quick)' if args.quick else ''}\n\n"
        f"Archive grows {FACTORS[0]}x to {FACTORS[-1]}x ({first['rows']:,} to {last['rows']:,} rows, "
        f"{rows_per_chunk:,} rows a chunk) in the real Archiver; {args.events} events per size, one at a "
        "time, through the Recall Manager (4 concurrent history-queries). Baseline: the same template "
        "as one query over the whole archive, same run.\n\n"
        "| rows | chunks | median TTFR (ms) | newest-chunk query alone: plan + run (ms) | "
        "whole-archive query (ms) | speedup |\n|---|---|---|---|---|---|\n"
        + "".join(f"| {p['rows']:,} | {p['chunks']} | {p['ttfr_median'] * 1e3:.1f} | "
                  f"{p['newest_chunk_query']['planning_median'] * 1e3:.1f} + "
                  f"{p['newest_chunk_query']['execution_median'] * 1e3:.1f} | "
                  f"{p['whole_median'] * 1e3:.1f} | {p['speedup']:.1f}x |\n" for p in points)
        + f"\nTTFR at {FACTORS[-1]}x / at 1x = **{growth:.2f}** (target <= {FLAT_TARGET}); first result "
        f"**{last['speedup']:.1f}x** faster than the whole-archive query at {last['rows']:,} rows "
        f"(target >= {SPEEDUP_TARGET:.0f}x at >= 10M rows): **{verdict}**"
        + ("" if big_enough else " (quick size: below the 10M rows the target is stated for)") + ".\n"
    )
    data = {"rows_per_chunk": rows_per_chunk, "events_per_size": args.events, "growth": growth,
            "flat_target": FLAT_TARGET, "speedup_target": SPEEDUP_TARGET, "verdict": verdict, "points": points}
    publish(name, data, md, fig)
    return 0 if verdict == "met" else 1


if __name__ == "__main__":
    raise SystemExit(main())
