"""The proportional-share benchmark's measurements, on a small size (no files written)."""

from __future__ import annotations

from bench.scheduler.proportional_share import run_lottery, run_textbook, workload


def test_benchmark_measures_stride_within_bound_and_lottery_worse():
    r = workload("3:2:1", [3, 2, 1], 60, seeds=5)
    assert r["stride"]["max_pairwise_relative_error"] <= 1
    assert r["textbook_stride"]["max_pairwise_relative_error"] <= 0.75  # common base: max/sum
    assert r["stride"]["final_quanta"] == [30, 20, 10]
    assert r["lottery_median_of_max_pairwise_error"] > r["stride"]["max_pairwise_relative_error"]


def test_baselines_are_what_they_claim():
    lot = run_lottery([1, 1], 1000, seed=3)
    assert lot.trace == run_lottery([1, 1], 1000, seed=3).trace  # seeded
    assert 400 < lot.trace.count(0) < 600
    assert run_textbook([100, 1], 101).trace == [0] * 100 + [1]  # light task waits its stride
