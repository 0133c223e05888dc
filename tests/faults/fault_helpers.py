"""Helpers of the fault-injection suite: a private embedded PostgreSQL the test may stop
and start (the shared servers, and the external one at 127.0.0.1:5432, are never
touched), and ``measuring`` which stores each fault's figures in ``$MOIRAE_FAULT_RUNS``
(set by ``python -m bench faults``, which publishes them in BENCHMARKS.md; a plain test
run writes them under the test data directory).

A test fills the figures as it measures them and asserts afterwards; ``measuring``
records them when the test ends, whether its assertions held or not, with ``passed`` and
the failure, so a regression is recorded as a miss instead of leaving the last good
figures in place.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parents[2]
TEST_DATA_DIR = Path(os.environ.get("MOIRAE_TEST_DATA_DIR", ROOT / ".moirae-test"))  # as tests/conftest.py
# bench.faults sets MOIRAE_FAULT_RUNS; a plain test run keeps its records out of bench/results
RUNS = Path(os.environ.get("MOIRAE_FAULT_RUNS", TEST_DATA_DIR / "faults_runs.json"))


class PrivateServer:
    """An embedded server in its own data directory, stoppable mid-test."""

    def __init__(self, pgdata: Path) -> None:
        import pgserver

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.pgdata = pgdata
        self.server = pgserver.get_server(str(pgdata), cleanup_mode=None)
        self.dsn = self.server.get_uri()

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        """Fast shutdown: open sessions are terminated, as in a real restart."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def ensure_running(self) -> None:
        try:
            psycopg2.connect(self.dsn).close()
        except psycopg2.OperationalError:
            self.start()

    def start(self) -> None:
        from pgserver.postgres_server import PostgresServer

        PostgresServer(self.pgdata, cleanup_mode=None)  # starts it on the same socket again
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(self.dsn).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        try:
            self.stop()
        except Exception:
            pass


def record(fault: str, **figures) -> None:
    """Store this run's figures of one fault (merged into ``faults_runs.json``), with the
    commit of the tree that measured them."""
    from bench.harness import commit

    RUNS.parent.mkdir(parents=True, exist_ok=True)
    entry = {**figures, "at": datetime.now(UTC).isoformat(timespec="seconds"),
             "load_avg_1m": round(os.getloadavg()[0], 2), "commit": commit()}
    with open(RUNS.with_suffix(".lock"), "w") as lock:  # tests on other workers record too
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(RUNS.read_text())
        except (FileNotFoundError, ValueError):
            data = {}
        data[fault] = entry
        tmp = RUNS.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        tmp.replace(RUNS)


@contextmanager
def measuring(fault: str, enabled: bool = True) -> Iterator[dict]:
    """The figures of one fault run, to fill while measuring; recorded when the block
    ends, with ``passed`` False and the ``failure`` when an assertion (or anything else)
    failed in it. A skip records nothing; ``enabled=False`` (a second backend of the same
    test) neither."""
    import pytest

    figures: dict = {}
    try:
        yield figures
    except pytest.skip.Exception:
        raise
    except BaseException as exc:
        if enabled:
            record(fault, **figures, passed=False, failure=f"{type(exc).__name__}: {str(exc)[:400]}")
        raise
    if enabled:
        record(fault, **figures, passed=True)


def backends(dsn: str) -> int:
    """Client sessions in ``pg_stat_activity`` other than the one asking."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                        "AND backend_type = 'client backend'")
            return cur.fetchone()[0]
    finally:
        conn.close()
