"""One run of the cluster scenario, in its own process (one SparkContext per process).

``python -m tests.cluster.cluster_child MASTER DSN SCHEMA DATA_DIR SCENARIO_FILE UNTIL SECONDS``:
deploys the ``cluster`` scenario (history, archive, the overload alerts, the norm
Recall, the contexts and Similarity Recall) on an engine whose ``spark.master`` is
MASTER, streams its live part up to scenario time UNTIL, runs until it has settled (at
most SECONDS: :func:`run_until_settled`) and closes the engine. The results stay in SCHEMA for the test to compare. Prints ``READY`` once
deployed and ``DONE`` at the end.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime

from tests.engine_factory import make_engine


def main(master, dsn, schema, data_dir, scenario_file, until, seconds) -> int:
    from moirae.engine.engine import EngineError

    for attempt in range(3):
        try:
            return run(master, dsn, schema, data_dir, scenario_file, until, float(seconds))
        except EngineError as exc:
            # On this shared 2-core machine a Python worker can miss Spark's fixed 10 s
            # connect-back window while four queries start at once. The engine resumes
            # from its checkpoints (exactly once), as after any restart.
            if "connect back" not in str(exc) or attempt == 2:
                raise
            print(f"RETRY after: {str(exc).splitlines()[0]}", flush=True)
    return 1


def run(master, dsn, schema, data_dir, scenario_file, until, seconds: float) -> int:
    from moirae.scenarios.cluster import deploy

    engine = make_engine((dsn, schema), data_dir,
                         spark={"master": master, "trigger": "1s"})
    try:
        deploy(engine, progress=False, scenario_file=scenario_file, live_options={"until": until})
        print("READY", flush=True)
        engine.start()
        run_until_settled(engine, datetime.fromisoformat(until), seconds)
        deadline = time.monotonic() + 180  # let every recall task reach a resting state
        while time.monotonic() < deadline and any(
                t.state.value in ("runnable", "running")
                for t in engine.deploy.manager.tasks()):
            time.sleep(0.5)
    finally:
        engine.close()
    print("DONE", flush=True)
    return 0


def _offsets_ns(progress) -> list[int]:
    """Scenario times (ns) the last micro-batch of a query read its scenario sources up to."""
    out = []
    for source in (progress or {}).get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict) and isinstance(end.get("t"), int):
            out.append(end["t"])
    return out


def _fingerprint(engine) -> tuple:
    """What a run's results are made of: the events with their contexts, the recall outputs."""
    with engine.deploy.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), md5(string_agg(eid || coalesce(context::text, '') || "
                    "coalesce(surrounding::text, ''), ',' ORDER BY eid)) FROM moirae_events")
        events = cur.fetchone()
        cur.execute("SELECT count(*) FROM moirae_recall_outputs")
        outputs = cur.fetchone()[0]
    return events, outputs


def run_until_settled(engine, until: datetime, seconds: float, calm_s: float = 5.0) -> None:
    """Run until every read of a live stream has got up to ``until``, every streaming
    query is idle, no recall task is runnable or running (a Similarity Recall task rests
    suspended) and :func:`_fingerprint` has not changed for ``calm_s`` (five 1 s
    triggers); at most ``seconds``. Both runs compared end on the same settled state
    instead of after a fixed time."""
    until_ns = int(until.timestamp() * 1e9)
    deadline = time.monotonic() + seconds
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        engine.run_for(min(1.0, max(0.0, deadline - time.monotonic())))  # raises if a live query failed
        queries = engine.spark.streams.active
        # each live stream is read by its archive query or by the event-query archiving it
        offsets = [t for q in queries for t in _offsets_ns(q.lastProgress)]
        reached = len(offsets) >= len(engine.sources.by_name) and min(offsets) >= until_ns
        idle = not any(q.status.get("isTriggerActive") or q.status.get("isDataAvailable") for q in queries)
        quiet = not any(t.state.value in ("runnable", "running") for t in engine.deploy.manager.tasks())
        now = _fingerprint(engine) if reached and idle and quiet else None
        if now is None or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= calm_s:
            print(f"SETTLED after {seconds - (deadline - time.monotonic()):.0f} s", flush=True)
            return


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
