"""bench.harness and bench.report: targets are stored with the results, a miss fails the
benchmark, a target is met only when its rounds' whole spread is, a result names its
commit and shows as stale when its code changed since, and the at-a-glance table is
generated from the JSON results (full runs over quick ones)."""

from __future__ import annotations

import json
import time

import pytest

from bench import harness


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(harness, "BENCHMARKS_MD", tmp_path / "BENCHMARKS.md")
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n\n<!-- glance -->\nold table\n<!-- /glance -->\n")
    return tmp_path


def test_targets_are_stored_and_the_glance_table_is_generated(results):
    met = harness.target("speed", ">= 2x", "2.5x", True)
    missed = harness.target("memory", "<= 10 %", "+14 %", False)
    harness.publish("demo_quick", {"x": 1}, "quick run", targets=[harness.target("speed", ">= 2x", "1.0x", False)])
    harness.publish("demo", {"x": 2}, "full run", targets=[met, missed])
    stored = json.loads((results / "results" / "demo.json").read_text())
    assert stored["targets"] == [met, missed]
    md = (results / "BENCHMARKS.md").read_text()
    assert "old table" not in md
    assert "| speed | >= 2x | 2.5x | met |" in md and "| memory | <= 10 % | +14 % | **missed** |" in md
    assert "1.0x" not in md  # the quick run is shadowed by the full one
    assert md.count("<!-- bench:demo -->") == 1 and "full run" in md


def test_exit_code_fails_on_a_miss_only():
    assert harness.exit_code([harness.target("a", "", "", True), harness.target("b", "", "", None)]) == 0
    assert harness.exit_code([harness.target("a", "", "", True), harness.target("b", "", "", False)]) == 1


def test_unresolved_targets_say_why(results):
    harness.publish("noisy", {}, "n", targets=[harness.target("overhead", "<= 5 %", "3 %", None, "baseline slower")])
    assert "**unresolved**: baseline slower" in (results / "BENCHMARKS.md").read_text()


def test_a_result_older_than_its_modules_targets_is_listed_not_fatal(results):
    (results / "results").mkdir(exist_ok=True)
    (results / "results" / "fairness.json").write_text(json.dumps({"benchmark": "fairness", "measured_at": "x"}))
    harness.write_glance()
    assert "predates the benchmark's current targets" in (results / "BENCHMARKS.md").read_text()


def test_a_benchmark_never_run_is_listed_as_not_run(results):
    """An empty results folder: every benchmark module with targets shows as not run,
    so the table cannot hide an unmeasured target by leaving it out."""
    harness.write_glance()
    md = (results / "BENCHMARKS.md").read_text()
    assert "| `engine_jvm` (never) |" in md and "not run yet" in md
    assert "`report`" not in md


def test_capacity_ladder_searches_down_for_a_configuration_behind_at_the_start(monkeypatch):
    """bench.engine_jvm.capacities: doubling up while a configuration keeps up, and halving
    down from the start for one that never did, so a slow configuration's capacity comes
    from the same run instead of a 0, then bisecting each bracket until its ends are
    within 10 % (the search itself; `measure` stands in for Spark)."""
    from bench.engine import engine_jvm

    caps = {"plain": 130_000, "slow": 3_000}
    tried: list[tuple[str, int]] = []

    def measure(_b, cfg, rate, _seconds, _warm):
        tried.append((cfg, rate))
        return {"config": cfg, "rate": rate, "sustained": rate <= caps[cfg]}

    monkeypatch.setattr(engine_jvm, "measure", measure)
    out = engine_jvm.capacities(None, ["plain", "slow"], start=20_000, seconds=1, warm=0, limit=1_000_000)
    # 80k kept up, 160k behind, then geometric midpoints: 113,137 yes, 134,543 no, 123,377 yes
    assert out["plain"]["sustained_rows_per_s"] == 123_377 and not out["plain"]["capped"]
    assert out["plain"]["bracket"] == [123_377, 134_543]
    lo, hi = out["slow"]["bracket"]
    assert lo <= caps["slow"] < hi and hi / lo <= 1.1 and out["slow"]["sustained_rows_per_s"] == lo
    assert [r for c, r in tried if c == "slow"][:4] == [20_000, 10_000, 5_000, 2_500]
    caps["slow"] = 100
    out = engine_jvm.capacities(None, ["slow"], start=20_000, seconds=1, warm=0, limit=20_000)
    assert out["slow"]["sustained_rows_per_s"] == 0  # below the floor (start / 16): no capacity found


def test_harness_examples_run():
    """bench.harness's examples run (bench modules are outside the package doctest sweep),
    and run_orders is a Williams design: over a cycle every item runs in every position
    equally often and right after every other item equally often."""
    import doctest
    import itertools
    from collections import Counter

    result = doctest.testmod(harness)
    assert result.attempted >= 10 and result.failed == 0
    for n in range(1, 8):
        cycle = n if n % 2 == 0 else 2 * n
        orders = harness.run_orders(range(n), 2 * cycle)
        assert orders[:cycle] == orders[cycle:]
        assert all(sorted(o) == list(range(n)) for o in orders)
        positions = Counter((x, o.index(x)) for o in orders[:cycle] for x in o)
        assert set(positions.values()) == {cycle // n}
        follows = Counter(pair for o in orders[:cycle] for pair in itertools.pairwise(o))
        assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1


@pytest.mark.parametrize(("module", "examples"), [
    ("engine_jvm", 5),  # the soak's verdicts: a sawtooth is bounded, a rise is not, one late hand-over is not a rise
    ("engine_e2e", 9),  # the rounds' summary, the CPU line, when a run's last batch ended from Spark's progress,
    # the throughput verdict from the rounds' spread
    ("archive_ingest", 1),  # the CPU sentence: where a measured run's time went
    ("fig7_partial_index", 3),  # the verdict from the rounds' ratios: met, missed, unresolved
    ("provenance", 2),  # a no-provenance baseline slower than backward leaves the target unresolved
    ("__main__", 6),  # which benchmarks `python -m bench NAME ...` runs; a typo or a per-benchmark option is refused
])
def test_bench_module_examples_run(module, examples):
    """A bench module's docstring examples run (bench modules are outside the package
    doctest sweep), at least as many as it is known to hold."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(harness.module_name(module)))
    assert result.attempted >= examples and result.failed == 0


def test_fig7_section_is_rendered_from_the_runs_samples():
    """bench.fig7_partial_index renders its section from a run's samples alone (as
    stored in the JSON, k as text): one table row per k, the worst paired ratio inside the
    indexed half, and a verdict that follows the rounds' spread."""
    from bench.archive import fig7_partial_index as fig7

    ks = [10, 30, 3000]
    rounds = {"half": {10: [1.0, 2.0, 1.2], 30: [2.0, 2.1, 2.2], 3000: [9.0, 9.0, 9.0]},
              "full": {10: [1.0, 1.0, 1.3], 30: [2.0, 2.0, 2.0], 3000: [3.0, 3.0, 3.0]}}
    samples = {**rounds, "none": {k: [5.0] * 3 for k in ks}}
    curves = {lab: {k: sorted(v)[1] for k, v in per.items()} for lab, per in samples.items()}
    curves["traditional"] = dict.fromkeys(ks, 1.0)
    layout = {"layout": {"recent_chunks": 2}}
    data = fig7.summarize({
        "archive": {"chunks": 4, "table_bytes": 2**20, "rows": 100, "chunk_bytes_mean": 2**18, "load_s": 1.0},
        "ks": ks, "inside_limit": 100, "curves_s": curves, "target": 1.1, "detail": {"half": layout},
        "reps": 1, "rounds": 3, "best_of": 1, "samples_s": samples,
        "smallest_k_after_longest_s": {"none": 1.0, "half": 1.0, "full": 1.0}})
    # a slow spell hitting half in one round and full in another moves the ratio of medians
    # (1.2 / 1.0), not the median of the rounds' ratios (1.0, 2.0, 0.92)
    assert data["half_over_full"]["10"] == 1.0 and data["half_over_full_of_medians"]["10"] == 1.2
    assert data["worst_inside_ratio"] == 1.05
    assert data["met"] is None  # k = 10 reaches 2.0 in one round, though its median is 1.0
    md = fig7.markdown(data)
    assert len([line for line in md.splitlines() if line.startswith("| 10 ") or line.startswith("| 30 ")
                or line.startswith("| 3000 ")]) == 3
    assert "**unresolved**" in md and "1.05**" in md
    assert fig7.targets(data)[0]["met"] is None


def test_fig7_is_judged_by_the_paired_rounds_server_time_when_measured():
    """With the paired comparison stored (both layouts back to back per k), the verdict is
    that of PostgreSQL's time: each k's 95 % interval of its rounds' half / full, not the
    curves' client times (here 3x slower in the half layout, and ignored)."""
    from bench.archive import fig7_partial_index as fig7

    ks = [10, 30, 3000]
    samples = {"half": {k: [3.0] for k in ks}, "full": {k: [1.0] for k in ks}, "none": {k: [5.0] for k in ks}}
    curves = {lab: {k: v[0] for k, v in per.items()} for lab, per in samples.items()}
    curves["traditional"] = dict.fromkeys(ks, 1.0)

    def run(half_server: list[float]) -> dict:
        n = len(half_server)
        pinned = {"ks": [10, 30], "rounds": n, "reps": 1, "best_of": 1, "server_best_of": 1,
                  "server_s": {"half": {10: half_server, 30: [1.0] * n}, "full": {10: [1.0] * n, 30: [1.0] * n}},
                  "client_s": {"half": {10: [2.0] * n, 30: [2.0] * n}, "full": {10: [2.0] * n, 30: [2.0] * n}},
                  "blocks": {"half": {10: [7] * n, 30: [9] * n}, "full": {10: [7] * n, 30: [9] * n}}}
        return fig7.summarize({
            "archive": {"chunks": 4, "table_bytes": 2**20, "rows": 100, "chunk_bytes_mean": 2**18, "load_s": 1.0},
            "ks": ks, "inside_limit": 100, "curves_s": curves, "target": 1.1,
            "detail": {"half": {"layout": {"recent_chunks": 2}}}, "reps": 1, "rounds": 1, "best_of": 1,
            "samples_s": samples, "smallest_k_after_longest_s": {"none": 1.0, "half": 1.0, "full": 1.0},
            "pinned": pinned})

    met = run([1.03, 0.99, 1.01, 1.02, 1.0, 1.01])
    assert met["met"] is True and met["pinned_summary"]["worst_k"] == "10"
    assert fig7.targets(met)[0]["met"] is True and "**Worst k = 10" in fig7.markdown(met)
    assert fig7.targets(met)[0]["what"].endswith("6 paired rounds)")
    missed = run([1.3, 1.25, 1.35, 1.28])
    assert missed["met"] is False and fig7.targets(missed)[0]["met"] is False
    assert run([0.8, 1.4, 0.9, 1.3])["met"] is None  # its interval straddles 1.1


def test_cpu_share_examples_run_and_it_counts_this_process():
    """bench.cpu_share classifies the processes it samples (docstring examples) and
    finds a second of this process's own CPU work under ``driver``."""
    import doctest

    from bench import cpu_share

    result = doctest.testmod(cpu_share)
    assert result.attempted >= 7 and result.failed == 0
    share = cpu_share.CpuShare(interval_s=0.2).start()
    t0 = time.process_time()
    while time.process_time() - t0 < 1.0:
        pass
    used = share.stop()
    assert 0.8 <= used["driver"] <= used["busy"] + 0.2, used


def test_cpu_share_scoped_to_this_run_leaves_other_processes_out():
    """With ``own``, a JVM that is not this process's child is not counted as the run's
    JVM (another session's Spark); one it started is."""
    import subprocess
    import sys

    import psutil

    from bench import cpu_share

    share = cpu_share.CpuShare(own=True)
    stranger = psutil.Process(1)  # not a descendant of this process
    assert share._scoped(stranger, "jvm") is None and share._scoped(stranger, "python_workers") is None
    assert share._scoped(stranger, "postgres") == "postgres"  # no postmaster given: every server counts
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert share._scoped(psutil.Process(child.pid), "jvm") == "jvm"
        assert cpu_share.CpuShare(postmaster=child.pid)._scoped(psutil.Process(child.pid), "postgres") == "postgres"
        assert cpu_share.CpuShare(postmaster=child.pid)._scoped(stranger, "postgres") is None
    finally:
        child.kill()
        child.wait()


def test_a_figure_without_a_goal_is_reported_not_unresolved(results):
    """A comparison an issue asks for with no goal (e.g. one worker vs two) is shown as
    reported; a figure with a goal that the run cannot decide stays unresolved."""
    harness.publish("cmp", {}, "c", targets=[harness.target("2 workers vs 1", "reported", "2.00x", None, "no goal"),
                                            harness.target("overhead", "<= 5 %", "3 %", None, "noise")])
    md = (results / "BENCHMARKS.md").read_text()
    assert "| 2 workers vs 1 | reported | 2.00x | reported: no goal |" in md
    assert "| overhead | <= 5 % | 3 % | **unresolved**: noise |" in md


def _git(*args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=harness.ROOT, capture_output=True, text=True, check=True).stdout.strip()


def test_a_result_names_its_commit_and_is_stale_when_its_code_changed_since(results):
    """publish records the commit checked out; a result whose measured paths changed
    since its commit, or that names no commit, is stale in the glance table."""
    harness.publish("demo", {}, "d", targets=[harness.target("speed", ">= 2x", "2.5x", True)])
    stored = json.loads((results / "results" / "demo.json").read_text())
    assert stored["commit"]["sha"] == _git("rev-parse", "HEAD") and isinstance(stored["commit"]["dirty"], bool)
    assert "at commit `" + stored["commit"]["sha"][:7] in (results / "BENCHMARKS.md").read_text()
    assert harness.staleness({}, ("bench",)) == "no commit recorded"
    parent = _git("rev-parse", "HEAD~1")
    assert harness.staleness({"commit": {"sha": parent, "dirty": False}}, (".",)).startswith("code changed since")
    assert harness.staleness({"commit": {"sha": _git("rev-parse", "HEAD"), "dirty": False}}, (".",)) == ""
    assert harness.staleness({"commit": {"sha": parent}}, None) == "its benchmark declares no measured paths"
    md = (results / "BENCHMARKS.md").read_text()
    assert "| **stale**: its benchmark declares no measured paths |" in md  # demo has no module


def test_every_benchmark_declares_the_paths_it_measures():
    """Each benchmark module with targets names, in MEASURES, existing paths of the
    repository, the benchmark's own file among them."""
    for name in harness.modules_with_targets():
        paths = harness.measured_paths(name)
        assert paths, f"{name} declares no MEASURES"
        assert all((harness.ROOT / p).exists() for p in paths), (name, paths)
        assert str(harness.module_file(name).relative_to(harness.ROOT)) in paths, (name, paths)


def test_a_target_is_met_only_when_its_whole_spread_is(results):
    """The verdict reads the rounds' spread: one round under the goal leaves a target
    unresolved, which the glance table counts as open, and a single run has no spread."""
    assert harness.verdict([0.733, 0.689, 0.707, 0.716], 0.7) is None
    assert harness.verdict([0.598, 0.566, 0.61, 0.59], 0.7) is False
    assert harness.verdict([201_936], 200_000) is None
    assert harness.verdict([3, 4], 5, at_least=False) is True
    harness.publish("noisy", {}, "n", targets=[harness.target("a", ">= 1", "1.1", True),
                                               harness.target("b", ">= 1", "1.0", None, "straddles"),
                                               harness.target("c", ">= 1", "0.5", False)])
    import re

    # the other open targets: benchmarks with no stored result here, not run (unresolved)
    counts = re.search(r"\*\*(\d+) targets: 1 met, (\d+) open \(1 missed, (\d+) unresolved\)",
                       (results / "BENCHMARKS.md").read_text())
    assert counts and int(counts[1]) == int(counts[2]) + 1 and int(counts[2]) == int(counts[3]) + 1


@pytest.mark.parametrize(("module", "data", "met"), [
    ("engine_e2e", {"provenance_over_plain": 0.706, "provenance_over_plain_by_round": [0.733, 0.689, 0.707, 0.716]},
     None),
    ("archive_ingest", {"seconds": {"raw_copy": 4.6, "spark_stream_runs": [7.07, 9.36, 8.55]}}, None),
])
def test_the_straddling_results_are_unresolved(module, data, met):
    """The provenance configuration (a round at 0.689) and archive_ingest (runs at 0.49
    and 0.65 of raw COPY) straddle their targets: unresolved, not met."""
    from bench.archive import archive_ingest
    from bench.engine import engine_e2e

    if module == "engine_e2e":
        assert engine_e2e.throughput_verdict(data, "provenance") is met
    else:
        assert harness.verdict(archive_ingest.round_ratios(data), 0.5) is met


def test_one_percentile_helper():
    """One percentile, on a 0-100 scale, numpy's linear interpolation."""
    import numpy as np

    xs = [0.3, 1.7, 0.2, 5.0, 2.2, 0.9, 1.1]
    for q in (0, 10, 50, 90, 99, 100):
        assert harness.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    with pytest.raises(ValueError):
        harness.percentile(xs, 1.5 * 100)


def test_fault_figures_of_a_failed_run_are_a_miss():
    """bench.faults: a fault test that failed (its figures recorded with passed False)
    is a missed target, whatever its figures say; a fault with no record of this run is
    not run (unresolved), never its older figures."""
    from bench.engine import faults

    runs = {"sql_injection": {"attempts": 76, "by_vector": {}, "effects": 0, "passed": False,
                              "failure": "AssertionError: boom", "at": "x", "load_avg_1m": 0}}
    ts = faults.targets({"runs": runs})
    sql = next(t for t in ts if t["what"].startswith("SQL injection"))
    assert sql["met"] is False and "boom" in sql["note"]
    assert next(t for t in ts if t["what"].startswith("malformed"))["met"] is None


def _bench_modules() -> list[str]:
    import pkgutil

    return [info.name for info in pkgutil.walk_packages([str(harness.BENCH)], prefix="bench.")]


@pytest.mark.parametrize("module", _bench_modules())
def test_every_bench_example_runs(module):
    """Every docstring example in bench/ runs, each one written (bench is outside the
    package doctest sweep of tests/test_doctests.py, which counts them the same way)."""
    import doctest
    import importlib
    from pathlib import Path

    from tests.test_doctests import written_examples

    mod = importlib.import_module(module)
    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted == written_examples(Path(mod.__file__))


def test_benchmarks_are_grouped_by_area_and_named_as_before():
    """Each benchmark lives in its area's subpackage; `python -m bench NAME` knows it by
    the name it had, and every module with targets is one of them."""
    from bench import __main__ as cli

    names = cli.available()
    assert {"engine_e2e", "fairness", "archive_ingest", "similarity_e2e", "provenance", "faults"} <= set(names)
    assert harness.modules_with_targets() <= set(names)
    assert all(cli.module_of(n).count(".") == 2 for n in names)
    assert not any(p.stem in names for p in harness.BENCH.glob("*.py"))  # none left at the top


def test_a_fault_run_records_its_figures_whether_it_passes_or_not(tmp_path, monkeypatch):
    """tests/faults' ``measuring`` records what a run measured even when its assertions
    fail, marked ``passed: False`` with the failure, so bench.faults reports a miss; a
    skipped run records nothing."""
    from tests.faults import fault_helpers

    monkeypatch.setattr(fault_helpers, "RUNS", tmp_path / "runs.json")
    with pytest.raises(AssertionError), fault_helpers.measuring("malformed") as figures:
        figures.update(lost=3)
        raise AssertionError("3 rows lost")
    rec = json.loads((tmp_path / "runs.json").read_text())["malformed"]
    assert rec["passed"] is False and rec["lost"] == 3 and "3 rows lost" in rec["failure"] and rec["commit"]["sha"]
    with fault_helpers.measuring("sql_injection") as figures:
        figures.update(effects=0)
    assert json.loads((tmp_path / "runs.json").read_text())["sql_injection"]["passed"] is True
    with pytest.raises(pytest.skip.Exception), fault_helpers.measuring("sigkill"):
        pytest.skip("no")
    assert "sigkill" not in json.loads((tmp_path / "runs.json").read_text())
