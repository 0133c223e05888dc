"""The maritime behaviours through the engine path: live pattern event-queries of a
Moirae engine (``Engine.pattern_query``, Spark Structured Streaming) over the rows
replayed from a Parquet file (``moirae_replay``, as fast as the queries take them), the
matches read back from the archived event streams ``ev_<behaviour>``."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd

from moirae.sources.maritime_patterns import BEHAVIOUR_PATTERNS

ROOT = Path(__file__).resolve().parents[2]


def _count(conn, schema: str, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',))
        if cur.fetchone()[0] is None:
            return 0
        cur.execute(f'SELECT count(*) FROM "{schema}"."{table}"')
        return int(cur.fetchone()[0])


def engine_matches(rows: pd.DataFrame, timeout: float = 900.0, trigger: str = "2 seconds") -> pd.DataFrame:
    """Every behaviour's matches (``behaviour, vessel_id, start, end``) found by a live
    engine over ``rows``: waits until the source is archived whole and the event
    streams stop growing (the watermark has passed the last behaviour)."""
    import psycopg2

    from archive.pg import ENV_DSN, embedded_dsn
    from moirae import Engine
    from moirae.sources.spark_replay import FORMAT, register_replay_source

    dsn = os.environ.get(ENV_DSN) or embedded_dsn(ROOT / ".moirae-bench")
    schema = f"maritime_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vessels.parquet"
        rows.to_parquet(path, index=False)
        engine = Engine.from_config(None, data_dir=str(Path(tmp) / "engine"),
                                    postgres={"dsn": dsn, "schema": schema}, spark={"trigger": trigger})
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        try:
            register_replay_source(engine.spark)
            df = (engine.spark.readStream.format(FORMAT).option("path", str(path)).option("ts_col", "ts")
                  .option("speedup", "max").option("maxRowsPerBatch", "50000").load().drop("ingest_ts", "delay_ms"))
            engine.source("vessels", df, ts="ts", lateness="1 minute", indexes=[("vessel_id",)])
            for name, sql in BEHAVIOUR_PATTERNS.items():
                engine.pattern_query(name, sql)
            engine.start()
            deadline = time.monotonic() + timeout
            last, stable = -1, 0
            while time.monotonic() < deadline and stable < 4:
                engine.run_for(5.0)
                if _count(conn, schema, "vessels") < len(rows):
                    continue
                n = sum(_count(conn, schema, f"ev_{b}") for b in BEHAVIOUR_PATTERNS)
                stable = stable + 1 if n == last else 0
                last = n
            if stable < 4:
                raise TimeoutError(f"the engine did not settle within {timeout:g} s")
            engine.stop()
            recs = []
            with conn.cursor() as cur:
                for b in BEHAVIOUR_PATTERNS:
                    if _count(conn, schema, f"ev_{b}"):
                        cur.execute(f'SELECT vessel_id, start_ts, end_ts FROM "{schema}"."ev_{b}"')
                        recs += [(b, v, pd.Timestamp(s), pd.Timestamp(e)) for v, s, e in cur.fetchall()]
        finally:
            engine.close()
            with conn.cursor() as cur:
                cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.close()
    df = pd.DataFrame(recs, columns=["behaviour", "vessel_id", "start", "end"])
    for c in ("start", "end"):
        df[c] = pd.to_datetime(df[c], utc=True)
    return df
