"""Proportional share: stride scheduling against a lottery baseline (M 4.4; Waldspurger).

Two workloads, each run through :class:`scheduler.StrideScheduler` (deduction off, so
tickets stay fixed; one quantum in flight) and through lottery scheduling (each quantum
goes to a task drawn at random with probability proportional to its tickets; seeded)
in the same process:

- ``3:2:1``: three tasks with tickets 3, 2 and 1 over 600 quanta.
- ``heavy vs ten light``: one task with 100 tickets against ten with 1 each, over 1,100
  quanta (ten full cycles of 110).

Errors are in quanta, after every prefix of the run (Waldspurger's definitions,
:mod:`scheduler.fairness`): the largest *pairwise relative error* over all pairs and
prefixes, and each task's largest *absolute error* ``|q - n * t / T|``. Lottery is run
with many seeds; its median and worst seed are reported. Also reported: the quantum at
which the last task got its first quantum, and the scheduler's cost per quantum.

Run: ``python -m bench proportional_share`` (``--quick`` for a smoke size).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from bench.harness import exit_code, publish, target
from scheduler import ManualClock, SchedulerConfig, StrideScheduler, absolute_error, relative_error

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/scheduler/proportional_share.py", "scheduler")


@dataclass
class Run:
    """One policy over one workload: the granted task index per quantum."""

    policy: str
    tickets: list[int]
    trace: list[int]

    def allocations(self) -> list[list[int]]:
        """Cumulative quanta per task after each quantum (row n-1 = after n quanta)."""
        q = [0] * len(self.tickets)
        rows = []
        for i in self.trace:
            q[i] += 1
            rows.append(list(q))
        return rows

    def errors(self) -> dict:
        t, total = self.tickets, sum(self.tickets)
        worst_pair = Fraction(0)
        worst_pair_at: tuple[int, int, int] = (0, 0, 0)
        worst_abs = [Fraction(0)] * len(t)
        first = [None] * len(t)
        for n, q in enumerate(self.allocations(), start=1):
            for i in range(len(t)):
                if first[i] is None and q[i]:
                    first[i] = n
                worst_abs[i] = max(worst_abs[i], absolute_error(q[i], t[i], n, total))
            for i, j in combinations(range(len(t)), 2):
                e = relative_error(q[i], t[i], q[j], t[j])
                if e > worst_pair:
                    worst_pair, worst_pair_at = e, (n, i, j)
        final = self.allocations()[-1]
        return {
            "max_pairwise_relative_error": float(worst_pair),
            "max_pairwise_relative_error_at": {"quantum": worst_pair_at[0], "tasks": worst_pair_at[1:]},
            "max_absolute_error_per_task": [round(float(x), 4) for x in worst_abs],
            "final_absolute_error_per_task": [
                round(float(absolute_error(final[i], t[i], len(self.trace), total)), 4) for i in range(len(t))
            ],
            "final_quanta": final,
            "last_first_quantum": max(f for f in first if f is not None) if all(first) else None,
        }


def run_stride(tickets: list[int], quanta: int) -> tuple[Run, float]:
    s = StrideScheduler(SchedulerConfig(tickets_per_result=0), clock=ManualClock())
    index = {s.submit(f"e{i}", tickets=t): i for i, t in enumerate(tickets)}
    trace = []
    t0 = time.perf_counter()
    for _ in range(quanta):
        g = s.choose()
        assert g is not None
        s.complete(g.task_id, results=0)
        trace.append(index[g.task_id])
    per_quantum = (time.perf_counter() - t0) / quanta
    return Run("stride", tickets, trace), per_quantum


def run_textbook(tickets: list[int], quanta: int) -> Run:
    """Waldspurger's basic algorithm as published (every task starts at pass = stride,
    ties by index), exact fractions: shows what the join clamp of
    :mod:`scheduler.stride` changes (when each task first runs)."""
    stride = [Fraction(1 << 20, t) for t in tickets]
    passes = list(stride)
    trace = []
    for _ in range(quanta):
        i = min(range(len(tickets)), key=lambda k: (passes[k], k))
        passes[i] += stride[i]
        trace.append(i)
    return Run("textbook stride", tickets, trace)


def run_lottery(tickets: list[int], quanta: int, seed: int) -> Run:
    rng = random.Random(seed)
    idx = list(range(len(tickets)))
    return Run("lottery", tickets, rng.choices(idx, weights=tickets, k=quanta))


def workload(name: str, tickets: list[int], quanta: int, seeds: int) -> dict:
    stride, cost = run_stride(tickets, quanta)
    textbook = run_textbook(tickets, quanta)
    lots = [run_lottery(tickets, quanta, seed) for seed in range(seeds)]
    lot_err = [r.errors() for r in lots]
    by_pair = [e["max_pairwise_relative_error"] for e in lot_err]
    median_seed = sorted(range(seeds), key=lambda k: by_pair[k])[seeds // 2]
    worst_seed = max(range(seeds), key=lambda k: by_pair[k])
    return {
        "name": name,
        "tickets": tickets,
        "quanta": quanta,
        "stride": stride.errors(),
        "textbook_stride": textbook.errors(),
        "stride_us_per_quantum": round(cost * 1e6, 1),
        "lottery_seeds": seeds,
        "lottery_median_seed": {"seed": median_seed, **lot_err[median_seed]},
        "lottery_worst_seed": {"seed": worst_seed, **lot_err[worst_seed]},
        "lottery_median_of_max_pairwise_error": statistics.median(by_pair),
        "lottery_median_of_max_abs_error": statistics.median(max(e["max_absolute_error_per_task"]) for e in lot_err),
        "_runs": (stride, lots[median_seed]),
    }


def overhead(sizes: list[int], quanta: int) -> list[dict]:
    """Scheduler cost per quantum (choose + complete, deduction on) by number of tasks,
    against a lottery draw over the same tickets (the baseline's whole cost)."""
    rows = []
    for n in sizes:
        s = StrideScheduler(SchedulerConfig(tickets_per_result=Fraction(1, 10)), clock=ManualClock())
        rng = random.Random(n)
        tickets = [rng.randint(1, 200) for _ in range(n)]
        for i, t in enumerate(tickets):
            s.submit(f"e{i}", tickets=t)
        t0 = time.perf_counter()
        for _ in range(quanta):
            g = s.choose()
            assert g is not None
            s.complete(g.task_id, results=rng.randint(0, 5))
        stride_us = (time.perf_counter() - t0) / quanta * 1e6
        idx = list(range(n))
        t0 = time.perf_counter()
        for _ in range(quanta):
            rng.choices(idx, weights=tickets)
        lottery_us = (time.perf_counter() - t0) / quanta * 1e6
        rows.append({"tasks": n, "stride_us": round(stride_us, 1), "lottery_us": round(lottery_us, 1)})
    return rows


def figure(results: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for row, res in enumerate(results):
        total = sum(res["tickets"])
        for col, run in enumerate(res["_runs"]):
            ax = axes[row][col]
            alloc = run.allocations()
            xs = range(1, len(alloc) + 1)
            shown = range(len(res["tickets"])) if len(res["tickets"]) <= 3 else [0, 1]
            for i in shown:
                t = res["tickets"][i]
                err = [a[i] - n * t / total for n, a in zip(xs, alloc, strict=True)]
                label = f"task {i} ({t} tickets)" if len(res["tickets"]) <= 3 else (
                    "heavy (100)" if i == 0 else "a light task (1)"
                )
                ax.plot(xs, err, label=label, lw=1)
            if run.policy == "stride" and len(res["tickets"]) <= 3:
                ax.set_xlim(0, 60)  # the pattern repeats every 6 quanta
            ax.axhline(0, color="grey", lw=0.5)
            ax.set_title(f"{res['name']}: {run.policy}")
            ax.set_xlabel("quanta granted")
            ax.set_ylabel("quanta received - entitled")
            ax.legend(fontsize=8)
    fig.suptitle("Allocation error over time: stride (left) vs lottery, median seed (right)")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    args = ap.parse_args(argv)
    seeds = 5 if args.quick else 101
    results = [
        workload("3:2:1", [3, 2, 1], 120 if args.quick else 600, seeds),
        workload("heavy vs ten light", [100] + [1] * 10, 220 if args.quick else 1100, seeds),
    ]
    cost = overhead([10, 200] if args.quick else [10, 200, 1000], 500 if args.quick else 5000)
    fig = figure(results)
    name = "proportional_share_quick" if args.quick else "proportional_share"
    md = [f"### Proportional share: stride vs lottery{' (quick)' if args.quick else ''}", ""]
    md.append(
        "Fixed tickets, one quantum at a time, `scheduler.StrideScheduler` against lottery "
        f"scheduling (random draw by tickets; {seeds} seeds, median and worst seed) in the same run. "
        "Errors in quanta, maximum over every prefix of the run; pairwise relative error as "
        "Waldspurger defines it (absolute error of the pair alone)."
    )
    md.append("")
    md.append("| workload | quanta | policy | max pairwise rel. error | max abs. error per task | last task's first quantum |")
    md.append("|---|---|---|---|---|---|")
    for r in results:
        rows = [
            ("stride (`scheduler`)", r["stride"]),
            ("textbook stride (all start at pass = stride)", r["textbook_stride"]),
            (f"lottery (median seed {r['lottery_median_seed']['seed']})", r["lottery_median_seed"]),
            (f"lottery (worst seed {r['lottery_worst_seed']['seed']})", r["lottery_worst_seed"]),
        ]
        for label, e in rows:
            abs_err = e["max_absolute_error_per_task"]
            shown = ", ".join(f"{x:.2f}" for x in abs_err) if len(abs_err) <= 3 else (
                f"heavy {abs_err[0]:.2f}; light max {max(abs_err[1:]):.2f}"
            )
            md.append(
                f"| {r['name']} | {r['quanta']} | {label} | {e['max_pairwise_relative_error']:.3f} | {shown} | "
                f"{e['last_first_quantum'] or 'never (some task got none)'} |"
            )
    md.append("")
    for r in results:
        ratio = r["lottery_median_of_max_pairwise_error"] / r["stride"]["max_pairwise_relative_error"]
        md.append(
            f"- **{r['name']}**: stride's largest pairwise relative error "
            f"{r['stride']['max_pairwise_relative_error']:.3f} quanta (bound: 1), lottery's median "
            f"{r['lottery_median_of_max_pairwise_error']:.2f} ({ratio:.1f}x). Stride's largest absolute "
            f"error {max(r['stride']['max_absolute_error_per_task']):.2f} quanta "
            f"(not bounded by 1 for flat stride scheduling), lottery's median "
            f"{r['lottery_median_of_max_abs_error']:.2f}."
        )
    md.append(
        "- Flat stride scheduling's absolute error is O(number of tasks) (Waldspurger): in the heavy "
        "vs light workload the ten light tasks hold equal passes and run back to back once per "
        "cycle, so the heavy task falls about 9 quanta behind its share and catches up, every cycle; "
        "the textbook algorithm shows the same size of error. Waldspurger's hierarchical stride "
        "scheduling would reduce it to O(log n); it is not built. `scheduler` lets a newcomer join no "
        "later than the lowest active pass, so every task runs early (last task's first quantum: "
        "stride vs textbook above)."
    )
    md.append("")
    md.append("Scheduler cost per quantum (choose + complete with deduction, exact fractions) vs one lottery draw:")
    md.append("")
    md.append(
        "(wall-clock on a shared machine, noisy; a history-query quantum costs milliseconds, so "
        "either is negligible)"
    )
    md.append("")
    md.append("| tasks | stride (µs) | lottery draw (µs) | ratio |")
    md.append("|---|---|---|---|")
    for c in cost:
        md.append(f"| {c['tasks']} | {c['stride_us']} | {c['lottery_us']} | {c['stride_us'] / c['lottery_us']:.1f}x |")
    data = {
        "workloads": [{k: v for k, v in r.items() if k != "_runs"} for r in results],
        "overhead": cost,
    }
    publish(name, data, "\n".join(md), figure=fig, targets=targets(data))
    print("\n".join(md))
    return exit_code(targets(data))


def targets(data: dict) -> list[dict]:
    """M 4.4: with fixed tickets, pairwise relative allocation error <= one quantum (stride)."""
    out = []
    for w in data["workloads"]:
        err = w["stride"]["max_pairwise_relative_error"]
        out.append(target(f"stride pairwise allocation error, tickets {w['name']}", "<= 1 quantum",
                          f"{err:.2f} quantum", err <= 1.0 + 1e-9))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
