"""Helpers of the fault-injection suite: a private embedded PostgreSQL the test may stop
and start (the shared servers, and the external one at 127.0.0.1:5432, are never
touched), and ``record`` which stores each fault's figures in
``bench/results/faults_runs.json`` for ``python -m bench.faults`` to publish in BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "bench" / "results" / "faults_runs.json"
TEST_DATA_DIR = Path(os.environ.get("MOIRAE_TEST_DATA_DIR", ROOT / ".moirae-test"))  # as tests/conftest.py


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
    """Store this run's figures of one fault (merged into ``faults_runs.json``)."""
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(RUNS.read_text())
    except (FileNotFoundError, ValueError):
        data = {}
    data[fault] = {**figures, "at": datetime.now(UTC).isoformat(timespec="seconds"),
                   "load_avg_1m": round(os.getloadavg()[0], 2)}
    tmp = RUNS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(RUNS)


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
