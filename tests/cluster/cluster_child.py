"""One run of the cluster scenario, in its own process (one SparkContext per process).

``python -m tests.cluster.cluster_child MASTER DSN SCHEMA DATA_DIR SCENARIO_FILE UNTIL SECONDS``:
deploys the ``cluster`` scenario (history, archive, the overload alerts, the norm
Recall, the contexts and Similarity Recall) on an engine whose ``spark.master`` is
MASTER, streams its live part up to scenario time UNTIL, runs SECONDS and closes the
engine. The results stay in SCHEMA for the test to compare. Prints ``READY`` once
deployed and ``DONE`` at the end.
"""

from __future__ import annotations

import sys
import time

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
        engine.run_for(seconds)
        deadline = time.monotonic() + 180  # let every recall task reach a resting state
        while time.monotonic() < deadline and any(
                t.state.value in ("runnable", "running")
                for t in engine.deploy.manager.tasks()):
            time.sleep(0.5)
    finally:
        engine.close()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
