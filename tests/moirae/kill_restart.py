"""Kill-and-restart runs of the small scenario's engine (``engine_child.py``), shared by the
single-kill test (``test_crash_recovery.py``) and the fault suite's 3-kill test
(``tests/faults/test_sigkill.py``).

:func:`run_with_kills` starts the child, waits until it reports an event whose recall is
open, sleeps the given extra delay and SIGKILLs it, once per delay, restarting it on the
same data directory and database each time; then a last restart runs until it has settled.
:func:`check_recovered` asserts the invariant "nothing is lost" (docs/ARCHITECTURE.md) on the result and returns
the figures the fault suite records.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import tests.moirae.scenario_small as sc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
START_TIMEOUT_S = 300
FINAL_RUN_S = 180  # the bound: the last run ends once settled (engine_child.settled)


@dataclass
class KillRun:
    """What a run with kills saw: per kill, the extra delay after the child first reported
    an open recall, how many events it reported open then, and how many events the
    database held open once it was dead (``open_at_kills``); the union of the latter."""

    live: list[pd.DataFrame]
    delays_s: list[float] = field(default_factory=list)
    reported_open: list[int] = field(default_factory=list)
    open_at_kills: list[int] = field(default_factory=list)
    killed_open: set[str] = field(default_factory=set)
    final_output: str = ""


def query(pg, sql: str) -> list[tuple]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def _child(args: list[str]) -> subprocess.Popen:
    # the children import this tree's code from the repository root
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MOIRAE_PG_DSN", None)
    return subprocess.Popen([sys.executable, "-m", "tests.moirae.engine_child", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _kill_when_open(args: list[str], delay: float) -> int:
    """Start the child, wait for its first report of an open recall ("EVENTS n OPEN m",
    m > 0), sleep ``delay`` more and SIGKILL it; the open count it reported."""
    child = _child([*args, "600"])
    deadline = time.monotonic() + START_TIMEOUT_S
    opened = 0
    try:
        for line in child.stdout:
            if line.startswith("EVENTS"):
                _, _n, _, m = line.split()
                if int(m) > 0:
                    opened = int(m)
                    break
            if time.monotonic() > deadline:
                break
        assert opened > 0, "the engine reported no event with an open recall before the deadline"
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    return opened


def run_with_kills(pg, tmp_path: Path, delays: Sequence[float]) -> KillRun:
    """The small scenario's live part (6 CSV parts, one per trigger) with one SIGKILL per
    entry of ``delays`` (seconds after the child reported an open recall), each followed
    by a restart on the same data directory and database; the last restart runs until it
    has settled (``engine_child.settled``: every source row and expected live event in,
    nothing open or unfinished), at most :data:`FINAL_RUN_S`, and closes the engine."""
    folder = tmp_path / "in"
    folder.mkdir()
    run = KillRun(live=sc.live(parts=6))
    for i, part in enumerate(run.live):
        part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                           header=False)
    args = [str(tmp_path / "data"), pg.dsn, pg.schema, str(folder)]
    for delay in delays:
        run.reported_open.append(_kill_when_open(args, delay))
        run.delays_s.append(round(delay, 2))
        # the process is dead: what the event log holds open is what was open at the kill
        still_open = {r[0] for r in query(pg, "SELECT eid FROM moirae_events WHERE NOT recall_ended")}
        run.open_at_kills.append(len(still_open))
        run.killed_open |= still_open
    # resumes from the checkpoints and the event log; ends once it holds every source row
    # and expected event with nothing open (FINAL_RUN_S when it never gets there)
    rows = len(sc.history()) + sum(len(part) for part in run.live)
    eids = ",".join(sorted(sc.expected_events(pd.concat(run.live))))
    child = _child([*args, str(FINAL_RUN_S), str(rows), eids])
    run.final_output, _ = child.communicate(timeout=600)
    return run


def check_recovered(pg, run: KillRun) -> dict:
    """Assert that nothing was lost (docs/ARCHITECTURE.md, invariants): the archive equals
    the source, each live event was detected once, every provenance edge points at an archived row, and
    every event open at a kill got its history (all tasks done) and its boundary.
    Returns the figures."""
    assert "CLOSED" in run.final_output
    source = pd.concat([sc.history(), *run.live])
    total, distinct = query(pg, "SELECT count(*), count(DISTINCT (ts, sid, bw)) FROM metrics")[0]
    assert total == distinct == len(source)
    # the live part's events; the history's come from materializing the archived chunks
    # (a low-priority task that runs once recall leaves the worker free), each once too
    events = query(pg, "SELECT eid, count(*) FROM ev_overload GROUP BY eid")
    start = run.live[0]["ts"].min()
    live_events = {e for e, in query(pg, f"SELECT eid FROM ev_overload WHERE ts >= '{start.isoformat()}'")}
    expected = sc.expected_events(pd.concat(run.live))
    assert live_events == expected, (f"live events missing {sorted(expected - live_events)}, "
                                     f"unexpected {sorted(live_events - expected)}")
    stored_twice = {e: n for e, n in events if n != 1}
    assert not stored_twice, f"events stored more than once: {stored_twice}"
    dangling = query(pg, "SELECT count(*) FROM ank_overload_edge e WHERE NOT EXISTS "
                         "(SELECT 1 FROM metrics m WHERE m._sid = e.source_id)")[0][0]
    assert dangling == 0 and query(pg, "SELECT count(*) FROM ank_overload_edge")[0][0] > 0
    ended = {r[0] for r in query(pg, "SELECT eid FROM moirae_events WHERE recall_ended")}
    bounded = {r[0] for r in query(pg, "SELECT DISTINCT eid FROM moirae_recall_outputs WHERE kind = 'boundary'")}
    # their recall ran to its end (every task "done"), not cut off by the final shutdown
    done = {e for e, row in query(pg, "SELECT eid, row FROM moirae_recall_outputs WHERE kind = 'boundary'")
            if set(row["ended"].values()) == {"done"}}
    assert run.killed_open <= ended and run.killed_open <= bounded and run.killed_open <= done
    return {"rows": int(total), "rows_expected": len(source), "lost": len(source) - int(distinct),
            "duplicated": int(total - distinct), "dangling_edges": int(dangling), "events": len(live_events),
            "open_without_history": len(run.killed_open - (ended & bounded & done))}
