"""The fault-injection suite's figures, published in BENCHMARKS.md.

The figures come from real runs: each test of ``tests/faults`` (marker ``faults``) fills
its figures as it measures and records them when it ends, passed or not
(``tests/faults/fault_helpers.measuring``). ``python -m bench faults`` runs the suite
(``pytest -m faults``) into a fresh record and publishes what that run measured: a fault
whose test failed is a missed target, and a fault with no record from this run (its test
skipped, or not collected) is listed as not run (unresolved), never filled in from an
older run. The latest records are kept in ``bench/results/faults_runs.json``.
``--quick`` runs the faults that are not marked ``slow``.

``--before REF`` measures a change in one run: the cancel storm test of git ``REF``
(exported with ``git archive``, run against the same servers) and then this tree's,
back to back; REF's ``storm_s`` is kept beside this tree's figures as ``before``.

    python -m bench faults [--quick] [--before REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import RESULTS, ROOT, exit_code, publish, target

RUNS = RESULTS / "faults_runs.json"
MEASURES = (  # the code this benchmark measures (bench.harness.staleness)
    "bench/engine/faults.py", "tests/faults", "moirae", "archive", "recall", "scheduler", "similarity",
    "ananke",
)
FAULTS = ["sigkill", "pg_restart", "malformed", "sql_injection", "cancel_storm", "disk_pressure", "disk_pressure_pg"]


def targets(data: dict) -> list[dict]:
    """Each fault's targets, judged from its figures; a run whose test failed is missed."""
    out = []
    for fault in FAULTS:
        run = data["runs"].get(fault)
        if run is not None and run.get("passed") is False:
            out.append(_failed(fault, run))
        else:
            out += [t for t in _targets_of_figures({fault: run} if run else {}) if _fault_of(t) == fault]
    return out


def _failed(fault: str, run: dict) -> dict:
    """The target of a fault whose test failed: missed, with what it measured before."""
    try:
        t = {**next(t for t in _targets_of_figures({fault: run}) if _fault_of(t) == fault), "met": False}
    except (KeyError, TypeError, StopIteration):  # it failed before measuring what the target reads
        shown = ", ".join(f"{k}={v}" for k, v in run.items() if k not in ("failure", "passed", "at", "commit",
                                                                       "load_avg_1m"))[:300]
        t = target(f"{FAULT_NAMES[fault]}: the test failed", "the test passes", shown or "-", False)
    return {**t, "note": f"the test failed: {run.get('failure', '?')}"}


def _targets_of_figures(r: dict) -> list[dict]:
    out: list[dict] = []

    def missing(what: str, goal: str) -> None:
        out.append(target(what, goal, "not run", None, "no record of this fault from this run (skipped, not "
                                                       "collected, or --quick)"))

    if (k := r.get("sigkill")) is not None:
        at_kills = k["open_events_at_kills"]
        out.append(target(f"SIGKILL of the engine x{k['kills']} (seeded), restart each time, each kill with "
                          "recall open",
                          "every kill hits open recall; 0 lost, 0 duplicated, open events get history, "
                          "no dangling provenance",
                          f"{k['lost']} lost, {k['duplicated']} duplicated, {k['open_without_history']} open "
                          f"events without history, {k['dangling_edges']} dangling edges; events with open "
                          f"recall at the kills: {at_kills} (killed {k['delays_s']} s after the engine "
                          "reported an open recall)",
                          k["lost"] == k["duplicated"] == k["open_without_history"] == k["dangling_edges"] == 0
                          and len(at_kills) == k["kills"] and all(n > 0 for n in at_kills)))
    else:
        missing("SIGKILL of the engine x3 (seeded), restart each time", "0 lost, 0 duplicated")
    if (p := r.get("pg_restart")) is not None:
        out.append(target("PostgreSQL restart mid-stream", "0 lost, retried, outage reported",
                          f"{p['lost']} lost, {p['duplicated']} duplicated, {p['failed_tasks']} failed tasks; "
                          f"down {p['server_down_s']} s, {p['retries']} retries, resumed {p['resumed_after_s']} s "
                          f"after restart; reported in {', '.join(p['reported_in'])}",
                          p["lost"] == p["duplicated"] == p["failed_tasks"] == 0 and p["retries"] > 0))
    else:
        missing("PostgreSQL restart mid-stream", "0 lost, retried, outage reported")
    if (m := r.get("malformed")) is not None:
        out.append(target("malformed rows at 1 % of a live stream", "100 % dead-lettered with reasons, rest archived",
                          f"{m['dead_lettered_pct']:.1f} % of {m['malformed']} dead-lettered with reasons, "
                          f"{m['archived']}/{m['good']} good rows archived",
                          m["dead_lettered_pct"] == 100.0 and m["archived"] == m["good"]
                          and m["with_reason"] == m["malformed"]))
    else:
        missing("malformed rows at 1 % of a live stream", "100 % dead-lettered")
    if (s := r.get("sql_injection")) is not None:
        out.append(target("SQL injection (event attributes, templates, API parameters, stream names)", "0 effects",
                          f"{s['effects']} effects in {s['attempts']} attempts", s["effects"] == 0))
    else:
        missing("SQL injection", "0 effects")
    if (c := r.get("cancel_storm")) is not None:
        one_by_one = (f"; one by one through Engine.cancel: {c['one_by_one_s']} s (one durable commit each)"
                      if "one_by_one_s" in c else "")
        if (b := c.get("before")) is not None:
            one_by_one += f"; before ({b['ref']}, same run, load {b['load_avg_1m']}): {b['storm_s']} s"
        out.append(target(f"cancel storm: {c['events']} events with open tasks", "all cancelled within 1 s",
                          f"{c['storm_s']} s through {c.get('path', 'Engine.cancel')}{one_by_one}; "
                          f"{c.get('resumable_after_restart', '?')} would resume after a restart",
                          c["storm_s"] <= 1.0 and c.get("resumable_after_restart", 0) == 0,
                          "each cancel commits the event's end in the event log (one connection and commit per event)"
                          if c["storm_s"] > 1.0 else ""))
        leaks = c["leaked_threads"] + c["leaked_threads_after_close"] + c["backends_after_close_minus_before"] \
            + max(0, c["backends_after"] - c["backends_during"])
        out.append(target("cancel storm: leaked threads, connections, PostgreSQL backends", "0",
                          f"{c['leaked_threads']} threads, {c['backends_after'] - c['backends_during']} backends "
                          f"after the storm, {c['backends_after_close_minus_before']} after close", leaks == 0))
    else:
        missing("cancel storm", "all cancelled within 1 s, 0 leaks")
    for key, where in (("disk_pressure", "data directory"),
                       ("disk_pressure_pg", "data directory with the embedded PostgreSQL")):
        if (d := r.get(key)) is not None:
            out.append(target(f"disk pressure: {where} on a full tmpfs ({d['tmpfs']})",
                              "clear error, no corrupt checkpoint, recovers",
                              f"{d['lost']} lost, {d['duplicated']} duplicated of {d['rows_expected']} rows; "
                              f"{d['events']}/{d['events_expected']} events, {d['events_duplicated']} duplicated; "
                              f"{d['clear_error_lines']} line(s) naming the full data directory, "
                              f"{d['traceback_lines']} traceback lines; paused {d['paused_after_s']} s after it "
                              f"filled, resumed {d['resumed_after_s']} s after space returned; restart from the "
                              f"checkpoints: {'failed' if d['restart_failed'] else 'clean'}, "
                              f"{len(d['empty_checkpoint_files'])} empty checkpoint files", bool(d["ok"])))
        else:
            missing(f"disk pressure: {where} on a full tmpfs", "clear error, no corrupt checkpoint, recovers")
    return out


FAULT_NAMES = {"sigkill": "SIGKILL of the engine", "pg_restart": "PostgreSQL restart mid-stream",
               "malformed": "malformed rows", "sql_injection": "SQL injection", "cancel_storm": "cancel storm",
               "disk_pressure": "disk pressure: data directory",
               "disk_pressure_pg": "disk pressure: data directory with the embedded PostgreSQL on a full tmpfs"}


def _fault_of(t: dict) -> str:
    what = t["what"].lower()
    for key, word in (("sigkill", "sigkill"), ("pg_restart", "postgresql restart"), ("malformed", "malformed"),
                      ("sql_injection", "sql injection"), ("cancel_storm", "cancel storm"),
                      ("disk_pressure_pg", "with the embedded postgresql on a full"),
                      ("disk_pressure", "disk pressure")):
        if word in what:
            return key
    raise KeyError(what)


def markdown(data: dict, ts: list[dict]) -> str:
    lines = [f"## Fault injection{' (quick)' if data.get('quick') else ''}", "",
             "Each row is a test in `tests/faults/` as `python -m bench faults` ran it (`pytest -m faults`); each "
             "test records its figures whether its assertions hold or not, so a failed test is a missed target; "
             "the records are kept in `bench/results/faults_runs.json`.", "",
             "| fault | target | measured | met | run at (load 1m) |", "|---|---|---|---|---|"]
    for t in ts:
        run = data["runs"].get(_fault_of(t))
        when = f"{run['at']} ({run['load_avg_1m']})" if run else "-"
        met = {True: "yes", False: "**no**", None: "?"}[t["met"]]
        note = f" ({t['note']})" if t.get("note") else ""
        lines.append(f"| {t['what']} | {t['target']} | {t['measured']}{note} | {met} | {when} |")
    return "\n".join(lines)


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, targets(data))


STORM_TEST = "tests/faults/test_cancel_storm.py"


def _storm(tree: Path, runs_file: Path) -> dict:
    """Run the cancel storm test of the source tree ``tree``; its recorded figures (in
    ``runs_file``, or in the tree's own results for a tree older than that setting)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MOIRAE_FAULT_RUNS": str(runs_file),
           "MOIRAE_TEST_DATA_DIR": os.environ.get("MOIRAE_TEST_DATA_DIR", str(ROOT / ".moirae-test"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", STORM_TEST],
                          cwd=tree, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench.faults: the cancel storm test of {tree} failed (exit {proc.returncode})")
    recorded = runs_file if runs_file.exists() else tree / "bench" / "results" / "faults_runs.json"
    return json.loads(recorded.read_text())["cancel_storm"]


def before_after(ref: str) -> dict:
    """The cancel storm of git ``ref`` and of this tree, measured back to back: this
    tree's figures, with ``before`` = ``ref``'s."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="moirae-before-") as tmp:
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        (Path(tmp) / "tree").mkdir()
        subprocess.run(["tar", "-x", "-C", str(Path(tmp) / "tree")], input=archive, check=True)
        old = _storm(Path(tmp) / "tree", Path(tmp) / "before.json")
        new = _storm(ROOT, Path(tmp) / "after.json")
    print(f"cancel storm: {sha} {old['storm_s']} s (load {old['load_avg_1m']}) -> this tree {new['storm_s']} s "
          f"(load {new['load_avg_1m']})")
    return {**new, "before": {"ref": sha, "storm_s": old["storm_s"], "at": old["at"],
                              "load_avg_1m": old["load_avg_1m"]}}


TESTS = {"test_sigkill": "sigkill", "test_pg_restart": "pg_restart", "test_malformed": "malformed",
         "test_sql_injection": "sql_injection", "test_cancel_storm": "cancel_storm",
         "test_disk_pressure[engine]": "disk_pressure", "test_disk_pressure[engine+pg]": "disk_pressure_pg"}


def run_suite(quick: bool, deselect: tuple[str, ...] = ()) -> tuple[dict, int]:
    """Run the fault tests (those not marked slow when ``quick``) into a fresh record:
    the runs they recorded, and pytest's exit status. A test that failed before it
    recorded anything (in its setup, say) gets a record of its failure from pytest's
    report, so it is a miss too."""
    marker = "faults and not slow" if quick else "faults"
    with tempfile.TemporaryDirectory(prefix="moirae-faults-") as tmp:
        fresh, junit = Path(tmp) / "faults_runs.json", Path(tmp) / "junit.xml"
        rc = subprocess.call([sys.executable, "-m", "pytest", "-m", marker, "-q", "-p", "no:cacheprovider",
                              f"--junitxml={junit}", *(f"--deselect={d}" for d in deselect), "tests/faults"],
                             cwd=ROOT, env={**os.environ, "MOIRAE_FAULT_RUNS": str(fresh)})
        runs = json.loads(fresh.read_text()) if fresh.exists() else {}
        for fault, failure in failed_tests(junit).items():
            runs.setdefault(fault, {"passed": False, "failure": failure, "at": datetime.now(UTC).isoformat(
                timespec="seconds"), "load_avg_1m": round(os.getloadavg()[0], 2)})
        return runs, rc


def failed_tests(junit: Path) -> dict[str, str]:
    """Fault -> the first failure or error pytest reported for its test (``--junitxml``).

    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "j.xml"
    >>> _ = f.write_text('<testsuites><testsuite><testcase classname="tests.faults.test_sql_injection" '
    ...                  'name="test_injection_attempts_have_no_effect[embedded]"><error message="ImportError: x"/>'
    ...                  '</testcase><testcase classname="tests.faults.test_disk_pressure" '
    ...                  'name="test_disk_pressure[engine+pg]"/></testsuite></testsuites>')
    >>> failed_tests(f)
    {'sql_injection': 'ImportError: x'}
    """
    from xml.etree import ElementTree

    if not junit.exists():
        return {}
    out: dict[str, str] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        module = case.get("classname", "").rsplit(".", 1)[-1]
        param = case.get("name", "").partition("[")[2].rstrip("]")
        fault = TESTS.get(f"{module}[{param}]") or TESTS.get(module)
        if bad is not None and fault is not None:
            out.setdefault(fault, (bad.get("message") or "failed")[:400])
    return out


def keep(runs: dict) -> None:
    """Merge this run's records into ``faults_runs.json`` (the latest record of each fault)."""
    stored = json.loads(RUNS.read_text()) if RUNS.exists() else {}
    RUNS.write_text(json.dumps({**stored, **runs}, indent=2, sort_keys=True, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the faults whose tests are not marked slow")
    ap.add_argument("--before", metavar="REF", help="also run REF's cancel storm test, back to back with this "
                                                    "tree's, and record its figure as before")
    args = ap.parse_args(argv)
    runs: dict = {}
    if args.before:
        runs["cancel_storm"] = before_after(args.before)
    measured, rc = run_suite(args.quick, deselect=(f"{STORM_TEST}::test_cancel_storm",) if args.before else ())
    runs.update(measured)
    keep(runs)
    data = {"runs": {k: runs[k] for k in FAULTS if k in runs}, "pytest_exit": rc, "quick": args.quick}
    ts = targets(data)
    publish("faults_quick" if args.quick else "faults", data, markdown(data, ts), targets=ts)
    return exit_code(ts)


if __name__ == "__main__":
    raise SystemExit(main())
