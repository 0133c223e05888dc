"""Fairness of recall scheduling (M 4.4).

200 events arrive at once, each with one Recall task (a per-chunk aggregate over the
``metrics`` stream, newest chunk first) over a many-chunk archive in the real Archiver,
with 4 history-queries at most in PostgreSQL. Measured per event: *time to first
result* (TTFR), from just before ``submit`` to the operator's first output reaching the
output sink (wall time), under

- **stride** scheduling (:class:`scheduler.scheduler.StrideScheduler`, M 4.4), and
- **FIFO** (:class:`scheduler.fifo.FifoScheduler`, the baseline, same manager, same
  archive, same run): the oldest task keeps its slot until it has read all its chunks.

Target: p99 TTFR under stride <= 1/5 of FIFO's. Once every event has its first result,
the remaining work is cancelled (it does not change any TTFR).

Run: ``python -m bench fairness [--quick]`` (quick: 40 events over 12 chunks; published
as ``fairness_quick``).
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

from bench.harness import exit_code, percentile, publish, target
from bench.recall._common import (
    HOSTS,
    NOW,
    FirstChunkOperator,
    FirstOutputClock,
    archive,
    database,
    load_chunks,
)
from recall.manager import RecallManager
from scheduler.clock import MonotonicClock
from scheduler.events import QuantumGranted
from scheduler.fifo import FifoScheduler
from scheduler.scheduler import StrideScheduler

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/recall/fairness.py", "bench/recall/_common.py", "recall", "scheduler", "archive")

TARGET = 1 / 5


def run_policy(arch, policy: str, n_events: int, workers: int, timeout: float) -> dict:
    clock = MonotonicClock()
    sched = StrideScheduler(clock=clock) if policy == "stride" else FifoScheduler(clock=clock)
    quanta = [0]
    if hasattr(sched, "add_listener"):
        sched.add_listener(lambda e: quanta.__setitem__(0, quanta[0] + 1) if isinstance(e, QuantumGranted) else None)
    sink = FirstOutputClock()
    mgr = RecallManager(arch, sched, max_concurrent=workers, on_output=sink, clock=clock, timeout_ms=600_000)
    try:
        mgr.register(FirstChunkOperator(arch))
        events = [{"eid": f"{policy}-{i}", "ts": NOW - timedelta(seconds=i + 1), "host": f"h{i % HOSTS}"}
                  for i in range(n_events)]
        submitted: dict[str, float] = {}
        t0 = time.perf_counter()
        for ev in events:
            submitted[ev["eid"]] = time.perf_counter()
            mgr.submit(ev, "ttfr")
        submit_s = time.perf_counter() - t0
        ok = sink.wait_all(submitted, timeout) and all(e in sink.first for e in submitted)
        failed = [v.error for v in mgr.tasks() if v.error]
        makespan = time.perf_counter() - t0
        chunks_done = sum(v.chunks_done for v in mgr.tasks())
    finally:
        mgr.close(timeout=60)
    ttfr = [sink.first[e] - s for e, s in submitted.items() if e in sink.first]
    return {
        "policy": policy,
        "complete": ok,
        "events": n_events,
        "with_first_result": len(ttfr),
        "failed_tasks": failed,
        "submit_seconds": submit_s,
        "makespan_seconds": makespan,
        "chunks_done_at_last_first_result": chunks_done,
        "quanta_granted": quanta[0] if hasattr(sched, "add_listener") else None,
        "ttfr_seconds": sorted(ttfr),
        "p50": percentile(ttfr, 50),
        "p90": percentile(ttfr, 90),
        "p99": percentile(ttfr, 99),
        "max": max(ttfr),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--chunks", type=int, default=None)
    ap.add_argument("--rows-per-chunk", type=int, default=None)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args(argv)
    n_events = args.events or (40 if args.quick else 200)
    chunks = args.chunks or (12 if args.quick else 48)
    rows = args.rows_per_chunk or (5_000 if args.quick else 20_000)
    name = "fairness_quick" if args.quick else "fairness"

    db = database("fairness")
    arch = archive(db)
    try:
        t = time.perf_counter()
        total = load_chunks(arch, 0, chunks, rows, batch_id=1)
        load_s = time.perf_counter() - t
        print(f"archive: {total:,} rows in {chunks} chunks, loaded in {load_s:.1f} s", flush=True)
        runs = {}
        for policy in ("stride", "fifo"):
            runs[policy] = r = run_policy(arch, policy, n_events, args.workers, timeout=1800)
            print(f"{policy:6s} p50 {r['p50']:.3f} s  p90 {r['p90']:.3f} s  p99 {r['p99']:.3f} s  "
                  f"max {r['max']:.3f} s  ({r['with_first_result']}/{n_events} events)", flush=True)
    finally:
        arch.close()
        db.drop_schema()

    s, f = runs["stride"], runs["fifo"]
    ratio = s["p99"] / f["p99"]
    verdict = "met" if ratio <= TARGET and s["complete"] and f["complete"] else "MISSED"
    print(f"p99 stride / FIFO = {ratio:.3f} (target <= {TARGET:.2f}): {verdict}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for r in (s, f):
        xs = r["ttfr_seconds"]
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=r["policy"])
    ax.set_xscale("log")
    ax.set_xlabel("time to first result (s, log)")
    ax.set_ylabel("fraction of events")
    ax.set_title(f"{n_events} events, {chunks} chunks each, {args.workers} concurrent history-queries")
    ax.legend()
    ax.grid(alpha=0.3)

    md = (
        f"### Recall fairness: time to first result, stride vs FIFO{' (quick)' if args.quick else ''}\n\n"
        f"{n_events} events at once, one Recall task each over {chunks} chunks "
        f"({total:,} rows, {rows:,} per chunk) in the real Archiver, {args.workers} concurrent "
        f"history-queries; FIFO is the baseline measured in the same run. Events are submitted back "
        f"to back (all {n_events} took {s['submit_seconds']:.2f} s under stride, {f['submit_seconds']:.2f} s "
        "under FIFO: each submit reads the chunk catalog); TTFR counts from each event's own submit.\n\n"
        "| policy | p50 (s) | p90 (s) | p99 (s) | max (s) | chunks read until the last first result |\n"
        "|---|---|---|---|---|---|\n"
        + "".join(f"| {r['policy']} | {r['p50']:.3f} | {r['p90']:.3f} | {r['p99']:.3f} | {r['max']:.3f} | "
                  f"{r['chunks_done_at_last_first_result']} |\n" for r in (s, f))
        + f"\n**p99 stride / FIFO = {ratio:.3f}** (target <= {TARGET:.2f}): **{verdict}**.\n"
    )
    data = {"events": n_events, "chunks": chunks, "rows_per_chunk": rows, "rows": total, "workers": args.workers,
            "load_seconds": load_s, "target_ratio": TARGET, "p99_ratio": ratio, "verdict": verdict,
            "stride": s, "fifo": f}
    publish(name, data, md, fig, targets=targets(data))
    return exit_code(targets(data))


def targets(data: dict) -> list[dict]:
    """Target: p99 time to first result under stride <= 1/5 of FIFO."""
    complete = data["stride"]["complete"] and data["fifo"]["complete"]
    return [target(f"fairness: p99 time to first result, stride / FIFO ({data['events']} events, "
                   f"{data['workers']} concurrent queries)", f"<= {data['target_ratio']}",
                   f"{data['p99_ratio']:.3f}", complete and data["p99_ratio"] <= data["target_ratio"],
                   "" if complete else "a policy left events without a first result")]


if __name__ == "__main__":
    raise SystemExit(main())
