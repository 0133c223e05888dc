"""A child process archiving one JetStream stream, for the kill test of
``tests/sources/test_nats.py``.

Usage: python -m tests.sources.broker_child DATA_DIR DSN SCHEMA STREAM SECONDS [TARGET [MAX_BATCH]]
Archives the JetStream stream STREAM as the source ``jsin`` (columns ts, id, v and the
stream sequence), at most MAX_BATCH messages a micro-batch (400 unless given), printing
"ARCHIVED n" every 0.2 s, until SECONDS pass, or until n reaches TARGET (then it closes
the engine and prints "CLOSED").
"""

from __future__ import annotations

import sys
import time

from moirae.sources.nats import build
from tests.engine_factory import make_engine


def archived(engine) -> int:
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('jsin') IS NOT NULL")
        if not cur.fetchone()[0]:
            return 0
        cur.execute("SELECT count(*) FROM jsin")
        return int(cur.fetchone()[0])


def main(data_dir: str, dsn: str, schema: str, stream: str, seconds: float, target: int | None,
         max_batch: int = 400) -> None:
    engine = make_engine((dsn, schema), data_dir, spark={"trigger": "200ms"})
    df = build(engine.spark, {"stream": stream, "seqColumn": "seq", "maxBatch": max_batch},
               "ts timestamp, id long, v double, seq long")
    engine.source("jsin", df, ts="ts", lateness="1 hour")
    engine.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = archived(engine)
        print(f"ARCHIVED {n}", flush=True)
        if target is not None and n >= target:
            break
        time.sleep(0.2)
    engine.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]),
         int(sys.argv[6]) if len(sys.argv) > 6 else None, int(sys.argv[7]) if len(sys.argv) > 7 else 400)
