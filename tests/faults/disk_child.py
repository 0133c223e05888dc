"""A child process running the small scenario's engine for the disk pressure test.

Usage: python -m tests.faults.disk_child DATA_DIR DSN SCHEMA FOLDER CONTROL

Logs as ``moirae`` commands do (everything to ``DATA_DIR/logs/engine.log``, warnings as
one line on stderr), archives the CSV files appearing in FOLDER and runs the overload
event-query on them, printing one ``STATUS {json}`` line per half second (the
supervisor's view of the live queries). When the file CONTROL/restart appears it stops
the engine and starts it again (every live query anew from its checkpoint) and prints
``RESTARTED``; when CONTROL/stop appears it closes the engine and exits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tests.moirae.scenario_small as sc
from moirae.runtime.errorlog import log_dir, route_logging
from tests.engine_factory import make_engine


def main(data_dir: str, dsn: str, schema: str, folder: str, control: str) -> None:
    route_logging(log_dir(data_dir) / "engine.log")
    engine = make_engine((dsn, schema), data_dir,
                         spark={"trigger": "300ms"}, archive={"chunk_span": "30m", "chunk_target_rows": 0})
    df = engine.spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(folder)
    engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
    engine.event_query("overload", sc.overload, inputs=["metrics"])
    engine.start()
    print("STARTED", flush=True)
    stop, restart = Path(control) / "stop", Path(control) / "restart"
    try:
        while not stop.exists():
            engine.run_for(0.5)
            print("STATUS " + json.dumps(engine.live_status()["queries"], default=str), flush=True)
            if restart.exists():
                restart.unlink()
                engine.stop()
                engine.start()
                print("RESTARTED", flush=True)
    finally:
        engine.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
