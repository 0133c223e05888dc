"""The bursts benchmark (bench/engine/bursts.py): its docstring examples, and that its
verdicts refuse a baseline that is none (a sustainable run that fell behind, an
archive-only run that processed nothing)."""

from __future__ import annotations

import doctest

import bench.engine.bursts as bursts


def test_docstring_examples_run():
    result = doctest.testmod(bursts)
    assert result.attempted >= 8 and result.failed == 0


def _round(sustainable: int, bounded: int, archive: int, kept_up: bool = True) -> dict:
    return {"sustainable": {"processed": sustainable, "kept_up": kept_up}, "burst_bounded": {"processed": bounded},
            "archive": {"processed": archive}}


def test_verdicts_follow_the_rounds():
    data = {"rounds": [_round(100, 90, 150), _round(100, 85, 160)]}
    data["ratios"] = bursts.ratios(data["rounds"])
    assert [t["met"] for t in bursts.targets(data)] == [True, True]
    data = {"rounds": [_round(100, 70, 300)]}
    data["ratios"] = bursts.ratios(data["rounds"])
    assert [t["met"] for t in bursts.targets(data)] == [False, False]


def test_a_baseline_that_is_none_leaves_the_target_unresolved():
    data = {"rounds": [_round(100, 95, 0, kept_up=False)]}
    data["ratios"] = bursts.ratios(data["rounds"])
    over_sustainable, over_archive = bursts.targets(data)
    assert over_sustainable["met"] is None and "fell behind" in over_sustainable["note"]
    assert over_archive["met"] is None and "no batch" in over_archive["note"]


def test_only_the_bounded_runs_have_a_bound():
    s = 100_000
    assert bursts.plan("sustainable", s) == (s, None)
    assert bursts.plan("burst_unbounded", s) == (bursts.OVER * s, None)
    for run in ("burst_bounded", "archive"):  # one trigger of what they are offered, the same for both
        offered, bound = bursts.plan(run, s)
        assert (offered, bound) == (bursts.OVER * s, int(offered * bursts.TRIGGER_S))


def test_the_found_rate_is_stepped_down_until_it_holds_a_whole_run():
    held = bursts.confirm(lambda rate: {"rate": rate, "sustained": rate <= 750}, 1000)
    assert held["rate"] == 729 and [r["rate"] for r in held["runs"]] == [1000, 900, 810, 729]
    assert bursts.confirm(lambda rate: {"rate": rate, "sustained": True}, 1000)["rate"] == 1000
    assert bursts.confirm(lambda rate: {"rate": rate, "sustained": False}, 1000)["rate"] == 0


def test_a_probe_at_the_edge_of_the_trigger_does_not_keep_up():
    edge = {"offered": 100, "seconds": 20, "queries": {"a": {"batches": 10, "p90_ms": 1997, "max_batch_rows": 200}}}
    assert bursts.keeps_up(edge) and not bursts.keeps_up(edge, bursts.HEADROOM)
