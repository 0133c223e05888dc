"""A child process running the small scenario's engine, for the SIGKILL recovery test.

Usage: python -m tests.moirae.engine_child DATA_DIR DSN SCHEMA FOLDER SECONDS [ROWS EIDS]
Runs the overload event-query with a slow Recall (so tasks are open when killed) over
CSV files in FOLDER for SECONDS (or until killed), printing "EVENTS n OPEN m" every 0.5 s
(n events detected, m of them with recall still open); the kill tests wait for m > 0.
With ROWS and EIDS (comma-separated event ids) it ends earlier, once it has settled
(:func:`settled` on three reports in a row): what it then holds is checked by the test
as after a run of SECONDS, which stays the bound when it never settles.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

from pyspark.sql import functions as F  # noqa: F401  (the scenario's functions use it)

import tests.moirae.scenario_small as sc
from tests.engine_factory import make_engine

# pg_sleep runs once per row: a 30-minute chunk holds 60 rows of one server, so about
# 0.4 s per chunk and 3 s per 3-hour recall (0.4 s per row took 24 s per chunk, so a
# final run of 60 s never finished one and only the shutdown ended it)
SLOW_SQL = ("SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n, max(pg_sleep(0.007)::text) AS slept "
            "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


UNFINISHED = {"runnable", "running", "suspended", "ending"}


def settled(engine, rows: int, eids: set[str]) -> bool:
    """At least ``rows`` rows archived in ``metrics``, every streaming query idle with no
    data left, every event of ``eids`` detected, none open, no recall task (the
    replica's included) unfinished."""
    deploy = engine.deploy
    with deploy.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM metrics")
        if cur.fetchone()[0] < rows:
            return False
    if any(q.status.get("isTriggerActive") or q.status.get("isDataAvailable") for q in engine.spark.streams.active):
        return False
    return (deploy.events.known(eids) == eids and not deploy.manager.open_events()
            and not deploy.events.open_events()
            and not any(t.state.value in UNFINISHED for t in deploy.manager.tasks()))


def main(data_dir: str, dsn: str, schema: str, folder: str, seconds: float, rows: int = 0,
         eids: set[str] | None = None) -> None:
    engine = make_engine((dsn, schema), data_dir,
                         spark={"trigger": "300ms"}, archive={"chunk_span": "30m", "chunk_target_rows": 0},
                         recall={"feedback_period": 100, "max_concurrent": 1})
    df = engine.spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(folder)
    engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
    if not engine.archiver.batch_ids("metrics"):
        engine.archiver.append("metrics", -1, sc.history(), bulk=True)
    engine.event_query("overload", sc.overload, inputs=["metrics"])
    engine.recall("overload", SLOW_SQL, name="slow", bound=timedelta(hours=3))
    engine.start()
    deadline = time.monotonic() + seconds
    calm = 0
    while time.monotonic() < deadline:
        print(f"EVENTS {len(engine.deploy.events.list(limit=1000))} OPEN {len(engine.deploy.manager.open_events())}",
              flush=True)
        calm = calm + 1 if eids and settled(engine, rows, eids) else 0
        if calm >= 3:
            break
        time.sleep(0.5)
    engine.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]),
         *((int(sys.argv[6]), set(sys.argv[7].split(","))) if len(sys.argv) > 7 else ()))
