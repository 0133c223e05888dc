"""Disk pressure: the engine's data directory on a small tmpfs that fills.

What goes on the tmpfs: the whole data directory of the engine (a child process, as
``moirae run`` would be): the Spark checkpoints of its live queries (offsets, commits,
the window state store of the event-query), Spark's temporary files
(``spark.local.dir``) and every log file (``engine.log``, ``spark.log``). Two cases:

- ``engine``: PostgreSQL's data stays on the ordinary disk (the suite's
  ``private_pg``), as with an external server;
- ``engine+pg``: the embedded PostgreSQL's data is on the same tmpfs too
  (``data_dir/pg``, as the embedded default puts it). A full disk then also fails the
  archive's writes (``DiskFull``: could not extend file ... No space left on device;
  the server stays up and the transaction, batch log included, rolls back), so the
  live query stops the same way and its batch is replayed once there is room. (A WAL
  write that fails makes PostgreSQL PANIC instead; the engine's side of a server that
  goes away is the PostgreSQL restart test's, ``test_pg_restart.py``.)

The run: two CSV parts are archived; then a ballast file fills the tmpfs, and three
more parts arrive while it is full; after a pause the ballast is removed and three more
parts arrive. Expected: each stopped live query is reported in one line naming the data
directory and that it is full, with no traceback and no Java stack on the terminal;
the queries resume from their checkpoints by themselves once space returns; the archive
holds every source row exactly once and the event-query's events are exactly those of
the whole input; finally the engine is stopped and started again, every live query
anew from the same checkpoints, and one more part goes through it (so the window state
store is read back), without error and without a duplicate (no corrupt checkpoint). Skipped, with the reason, where
``mount -t tmpfs`` is not permitted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import psycopg2
import pytest

import tests.moirae.scenario_small as sc
from tests.faults.fault_helpers import TEST_DATA_DIR, PrivateServer, measuring

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]
HERE = Path(__file__).resolve().parent

SIZE = "24m"
SIZE_WITH_PG = "120m"  # an initialised PostgreSQL takes about 40 MB
PARTS = 8


def _mount(mnt: Path, size: str) -> None:
    mnt.mkdir(parents=True, exist_ok=True)
    try:  # mode 0777: the embedded PostgreSQL runs as another user when the tests run as root
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(mnt)], check=True,
                       capture_output=True, text=True, timeout=30)
    except (subprocess.CalledProcessError, FileNotFoundError, subprocess.TimeoutExpired) as exc:
        reason = getattr(exc, "stderr", "") or exc
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {str(reason).strip()}")


@pytest.fixture
def disk(request, tmp_path):
    """``(tmpfs mount point, dsn, schema)``: the engine's data directory goes on the
    tmpfs; with ``pg`` the embedded PostgreSQL's data too (a server of its own there,
    under the suite's data directory, which that server's user can reach)."""
    if request.param == "engine":
        mnt = tmp_path / "disk"
        _mount(mnt, SIZE)
        try:
            pg, db = request.getfixturevalue("private_pg"), request.getfixturevalue("private_db")
            yield mnt, pg.dsn, db.schema
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        return
    mnt = TEST_DATA_DIR / f"disk-{uuid.uuid4().hex[:8]}"
    _mount(mnt, SIZE_WITH_PG)
    server = None
    try:
        server = PrivateServer(mnt / "data" / "pg")
        server.ensure_running()
        yield mnt, server.dsn, "disk"
    finally:
        if server is not None:
            server.close()
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        try:
            mnt.rmdir()
        except OSError:
            pass


class Child:
    """The engine child: its output collected by a thread, its STATUS lines parsed."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
        env.pop("MOIRAE_PG_DSN", None)
        env.pop("MOIRAE_LOG_DIR", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.disk_child", *args], cwd=HERE.parents[1],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.status: dict = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("STATUS "):
                self.status = json.loads(line[7:])
            else:
                self.lines.append(line.rstrip("\n"))

    def wait_for(self, what, timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"the engine child exited ({self.proc.returncode}) waiting for {why}:\n"
                                     + "\n".join(self.lines[-30:]))
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {why}; status {self.status}; output:\n"
                                     + "\n".join(self.lines[-30:]))
            time.sleep(0.1)

    def stop(self, control: Path, timeout: float = 90) -> int:
        (control / "stop").touch()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(10)
        (control / "stop").unlink()
        return rc


def _q(dsn: str, schema: str, sql: str):
    conn = psycopg2.connect(dsn, options=f"-c search_path={schema}")
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def _fill(path: Path) -> int:
    """Write zeros into ``path`` until the file system is full; returns the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                n += f.write(b"\0" * (1 << 16))
        except OSError:
            pass
        try:  # the last few hundred bytes too, so the next write anywhere fails
            while True:
                n += f.write(b"\0" * 512)
        except OSError:
            pass
    return n


@pytest.mark.parametrize("disk", ["engine", "engine+pg"], indirect=True)
def test_disk_pressure(disk, tmp_path, request):
    with_pg = request.node.callspec.params["disk"] == "engine+pg"
    with measuring("disk_pressure_pg" if with_pg else "disk_pressure") as figures:
        _fill_and_recover(disk, tmp_path, with_pg, figures)


def _fill_and_recover(disk, tmp_path: Path, with_pg: bool, figures: dict) -> None:
    """Run the engine, fill its disk, free it, restart from the checkpoints; fill
    ``figures`` with what was lost, logged and left behind, then assert on them. Long:
    one scenario in order, each phase waiting for the previous one's effect."""
    tmpfs, dsn, schema = disk
    data = tmpfs / "data"
    folder, control = tmp_path / "in", tmp_path / "control"
    folder.mkdir()
    control.mkdir()
    live = sc.live(parts=PARTS + 1)  # the last part after the restart, so the state store is read back

    def put(i: int) -> None:  # written aside, then renamed in: the file source never sees half a file
        part = live[i].assign(ts=live[i]["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
        part.to_csv(tmp_path / f".p{i}.csv", index=False, header=False)
        os.replace(tmp_path / f".p{i}.csv", folder / f"p{i}.csv")

    def archived() -> int:
        rows = _q(dsn, schema, "SELECT to_regclass('metrics') IS NOT NULL")[0][0]
        return _q(dsn, schema, "SELECT count(*) FROM metrics")[0][0] if rows else 0

    args = [str(data), dsn, schema, str(folder), str(control)]
    t0 = time.monotonic()
    child = Child(args)
    child.wait_for(lambda: "STARTED" in child.lines, 180, "the engine to start")
    phases = {"start": time.monotonic() - t0}
    for i in range(2):
        put(i)
        child.wait_for(lambda i=i: archived() >= (i + 1) * len(live[0]), 90, f"part {i} to be archived")

    phases["first_parts"] = time.monotonic() - t0 - sum(phases.values())
    ballast = tmpfs / "ballast"
    filled = _fill(ballast)
    full_at = time.monotonic()
    before_full = len(child.lines)
    for i in range(2, 5):
        put(i)
    # metrics is archived by the event-query's own read (archive.shared_read): that one
    # query writes both the archive and the window state, and both stop with it
    child.wait_for(lambda: {q["query"] for q in child.status.get("paused", [])} >= {"event_overload"},
                   90, "the live query to be paused by the full disk")
    paused_after_s = time.monotonic() - full_at
    time.sleep(2)  # stays paused while the disk is full
    assert {q["query"] for q in child.status["paused"]} >= {"event_overload"}
    while_full = child.lines[before_full:]

    ballast.unlink()
    freed_at = time.monotonic()
    child.wait_for(lambda: archived() >= 5 * len(live[0]) and not child.status.get("paused"), 90,
                   "the queries to resume and archive the parts that came while the disk was full")
    resumed_s = time.monotonic() - freed_at
    for i in range(5, PARTS):
        put(i)
    child.wait_for(lambda: archived() >= PARTS * len(live[0]), 90, "the parts after the disk had room again")
    expected = sc.expected_events(pd.concat(live[:PARTS]))
    child.wait_for(lambda: {r[0] for r in _q(dsn, schema, "SELECT eid FROM moirae_events")} >= expected, 60,
                   "the events of the whole input")
    phases["full_and_back"] = time.monotonic() - t0 - sum(phases.values())
    # every live query anew from its checkpoint (a new Spark query run reads offsets,
    # commits and the state store from the files): starts cleanly, adds nothing
    (control / "restart").touch()
    child.wait_for(lambda: "RESTARTED" in child.lines, 90, "the engine to restart from its checkpoints")
    put(PARTS)
    child.wait_for(lambda: archived() >= (PARTS + 1) * len(live[0]), 90, "the part after the restart")
    time.sleep(1)
    restart_failed = child.status.get("failed") or {}
    phases["restart"] = time.monotonic() - t0 - sum(phases.values())
    assert child.stop(control) == 0, "\n".join(child.lines[-30:])
    phases["stop"] = time.monotonic() - t0 - sum(phases.values())

    assert sc.expected_events(pd.concat(live)) == expected  # the last part brings no overload
    total, distinct = _q(dsn, schema, "SELECT count(*), count(DISTINCT (ts, sid)) FROM metrics")[0]
    events = _q(dsn, schema, "SELECT eid, count(*) FROM ev_overload GROUP BY eid")
    logged = {r[0] for r in _q(dsn, schema, "SELECT eid FROM moirae_events")}
    output = child.lines
    clear = [ln for ln in while_full if "is full (No space left on device)" in ln and str(data) in ln]
    spew = [ln for ln in output if "Traceback" in ln or ln.startswith("\tat ") or "Exception in task" in ln
            or ln.lstrip().startswith("at org.apache")]
    stray = sorted(str(p.relative_to(data)) for p in (data / "checkpoints").rglob("*")
                   if p.is_file() and p.stat().st_size == 0 and not p.name.endswith((".tmp", ".crc")))
    rows = (PARTS + 1) * len(live[0])
    figures.update({"tmpfs": SIZE_WITH_PG if with_pg else SIZE, "postgres_on_tmpfs": with_pg, "ballast_bytes": filled, "rows": int(total), "rows_expected": rows,
               "lost": rows - int(distinct), "duplicated": int(total) - int(distinct),
               "events": len(events), "events_expected": len(expected),
               "events_duplicated": sum(n - 1 for _, n in events),
               "paused_after_s": round(paused_after_s, 2), "resumed_after_s": round(resumed_s, 2),
               "clear_error_lines": len(clear), "lines_while_full": len(while_full), "traceback_lines": len(spew),
               "empty_checkpoint_files": stray, "restart_failed": restart_failed,
               "messages": [ln[:300] for ln in while_full[:6]],
               "phases_s": {k: round(v, 1) for k, v in phases.items()}})
    figures["ok"] = (figures["lost"] == figures["duplicated"] == figures["events_duplicated"] == 0
                     and {e for e, _ in events} == expected == logged and len(clear) >= 1 and not spew
                     and not stray and not restart_failed)
    assert total == distinct == rows, figures
    assert {e for e, _ in events} == expected and {n for _, n in events} == {1}, figures
    assert logged == expected, figures
    assert clear, f"no line naming {data} and that it is full; output while full:\n" + "\n".join(while_full)
    assert not spew, "\n".join(spew[:20])
    assert not stray, stray
    assert not restart_failed, restart_failed
