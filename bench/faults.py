"""The fault-injection suite's figures (issue 12 §6), published in BENCHMARKS.md.

The figures come from real runs: each test of ``tests/faults`` (marker ``faults``, run by
``make test``) records what it measured in ``bench/results/faults_runs.json``. This module
turns the latest run of each fault into the BENCHMARKS.md section and its targets;
``--run`` runs the suite first (``pytest -m faults``). A fault with no recorded run is
listed as not run (target unresolved), never filled in.

``--before REF`` measures a change in one run: the cancel storm test of git ``REF``
(exported with ``git archive``, run against the same servers) and then this tree's,
back to back; REF's ``storm_s`` is kept beside this tree's figures as ``before``.

    python -m bench.faults [--run] [--before REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.report import RESULTS, ROOT, exit_code, publish, target

RUNS = RESULTS / "faults_runs.json"
FAULTS = ["sigkill", "pg_restart", "malformed", "sql_injection", "cancel_storm", "disk_pressure", "disk_pressure_pg"]


def targets(data: dict) -> list[dict]:
    r = data["runs"]
    out: list[dict] = []

    def missing(what: str, goal: str) -> None:
        out.append(target(what, goal, "not run", None, "no recorded run of this fault test"))

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
    lines = ["## Fault injection (issue 12 §6)", "",
             "Each row is the latest run of a test in `tests/faults/` (`pytest -m faults`, part of `make test`); "
             "the tests record their figures in `bench/results/faults_runs.json`.", "",
             "| fault | target | measured | met | run at (load 1m) |", "|---|---|---|---|---|"]
    for t in ts:
        run = data["runs"].get(_fault_of(t))
        when = f"{run['at']} ({run['load_avg_1m']})" if run else "-"
        met = {True: "yes", False: "**no**", None: "?"}[t["met"]]
        note = f" ({t['note']})" if t.get("note") else ""
        lines.append(f"| {t['what']} | {t['target']} | {t['measured']}{note} | {met} | {when} |")
    return "\n".join(lines)


STORM_TEST = "tests/faults/test_cancel_storm.py"


def _storm(tree: Path) -> dict:
    """Run the cancel storm test of the source tree ``tree``; its recorded figures."""
    env = {**os.environ, "PYTHONPATH": str(tree),
           "MOIRAE_TEST_DATA_DIR": os.environ.get("MOIRAE_TEST_DATA_DIR", str(ROOT / ".moirae-test"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", STORM_TEST],
                          cwd=tree, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench.faults: the cancel storm test of {tree} failed (exit {proc.returncode})")
    return json.loads((tree / "bench" / "results" / "faults_runs.json").read_text())["cancel_storm"]


def before_after(ref: str) -> dict:
    """The cancel storm of git ``ref`` and of this tree, measured back to back; this
    tree's figures (recorded by its test) get ``before`` = ``ref``'s."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="moirae-before-") as tmp:
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        old = _storm(Path(tmp))
    new = _storm(ROOT)
    runs = json.loads(RUNS.read_text())
    runs["cancel_storm"]["before"] = {"ref": sha, "storm_s": old["storm_s"], "at": old["at"],
                                      "load_avg_1m": old["load_avg_1m"]}
    RUNS.write_text(json.dumps(runs, indent=2, sort_keys=True, default=str) + "\n")
    print(f"cancel storm: {sha} {old['storm_s']} s (load {old['load_avg_1m']}) -> this tree {new['storm_s']} s "
          f"(load {new['load_avg_1m']})")
    return runs["cancel_storm"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run the fault suite first (pytest -m faults)")
    ap.add_argument("--quick", action="store_true", help="accepted for `python -m bench --quick`; same as without")
    ap.add_argument("--before", metavar="REF", help="also run REF's cancel storm test, back to back with this "
                                                    "tree's, and record its figure as before")
    args = ap.parse_args(argv)
    if args.run:
        subprocess.run([sys.executable, "-m", "pytest", "-m", "faults", "-q", "tests/faults"], cwd=ROOT, check=False)
    if args.before:
        before_after(args.before)
    runs = json.loads(RUNS.read_text()) if RUNS.exists() else {}
    data = {"runs": {k: runs[k] for k in FAULTS if k in runs}}
    ts = targets(data)
    publish("faults", data, markdown(data, ts), targets=ts)
    return exit_code(ts)


if __name__ == "__main__":
    raise SystemExit(main())
