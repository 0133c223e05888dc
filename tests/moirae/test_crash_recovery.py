"""Crash recovery (DESIGN.md §6 "Nothing is lost"): the engine process is SIGKILLed
mid-stream while recall tasks are open, then restarted on the same data directory and
database. The archive equals the source (no loss, no duplicates), every provenance edge
points at an archived source tuple and each graph item is stored once, and the events
whose recall was open before the kill get their history after the restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import scenario_small as sc

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]
HERE = Path(__file__).resolve().parent


def _child(args, env):
    return subprocess.Popen([sys.executable, str(HERE / "engine_child.py"), *args], cwd=HERE.parents[1],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _q(pg, sql):
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_sigkill_with_open_recall_then_restart(pg, tmp_path, monkeypatch):
    if pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the process-kill test (slow)")
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{HERE.parents[1]}"}
    env.pop("MOIRAE_PG_DSN", None)
    folder = tmp_path / "in"
    folder.mkdir()
    live = sc.live(parts=6)
    for i, part in enumerate(live):
        part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                           header=False)
    args = [str(tmp_path / "data"), pg.dsn, pg.schema, str(folder)]

    child = _child([*args, "600"], env)
    deadline = time.monotonic() + 300
    open_before = 0
    for line in child.stdout:
        if line.startswith("EVENTS"):
            _, n, _, opened = line.split()
            if int(n) > 0 and int(opened) > 0:
                open_before = int(opened)
                break
        assert time.monotonic() < deadline, "no event with an open recall before the deadline"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert open_before > 0
    killed_open = {r[0] for r in _q(pg, "SELECT eid FROM moirae_events WHERE NOT recall_ended")}
    assert killed_open, "the kill should leave events whose recall had not ended"

    child = _child([*args, "60"], env)  # restart: resumes from checkpoints and the event log
    out, _ = child.communicate(timeout=600)
    assert "CLOSED" in out

    source = pd.concat([sc.history(), *live])
    total, distinct = _q(pg, "SELECT count(*), count(DISTINCT (ts, sid, bw)) FROM metrics")[0]
    assert total == distinct == len(source)
    # the live part's events; the history's come from materializing the archived chunks
    # (a low-priority task that runs once recall leaves the worker free), each once too
    events = _q(pg, "SELECT eid, count(*) FROM ev_overload GROUP BY eid")
    start = live[0]["ts"].min()
    live_events = {e for e, in _q(pg, f"SELECT eid FROM ev_overload WHERE ts >= '{start.isoformat()}'")}
    assert live_events == sc.expected_events(pd.concat(live)) and {n for _, n in events} == {1}
    # Provenance: edges point at archived tuples; labels at known vertices.
    dangling = _q(pg, "SELECT count(*) FROM ank_overload_edge e WHERE NOT EXISTS "
                      "(SELECT 1 FROM metrics m WHERE m._sid = e.source_id)")[0][0]
    assert dangling == 0
    assert _q(pg, "SELECT count(*) FROM ank_overload_edge")[0][0] > 0
    # The events left open by the kill got their history and their boundary after the restart.
    ended = {r[0] for r in _q(pg, "SELECT eid FROM moirae_events WHERE recall_ended")}
    assert killed_open <= ended
    bounded = {r[0] for r in _q(pg, "SELECT DISTINCT eid FROM moirae_recall_outputs WHERE kind = 'boundary'")}
    assert killed_open <= bounded
    # ... because their recall ran to its end, not because the final shutdown cut it off
    done = {e for e, row in _q(pg, "SELECT eid, row FROM moirae_recall_outputs WHERE kind = 'boundary'")
            if set(row["ended"].values()) == {"done"}}
    assert killed_open <= done
