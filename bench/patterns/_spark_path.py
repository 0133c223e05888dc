"""Our side of the Flink comparison through the path a user's rows take: Spark Structured
Streaming with the live pattern operator running every pattern of the workload
(``moirae.patterns.spark_operator.pattern_set_stream``, what ``Engine.pattern_queries``
deploys), over the same header-less CSV Flink reads.

One streaming query per workload: the CSV read as a file stream (its times parsed
inside the query), the event time's watermark 1 s behind (as Flink's), one operator for
all the patterns (one ``transformWithStateInPandas`` per vessel, RocksDB state store,
provenance on, each pattern's matcher state per vessel), its matches collected to the
driver. The end of the file moves the watermark to the end of time in Flink; here a
second file holds one row of a sentinel vessel a day after the last row, so the next
micro-batch's watermark passes every row and every WITHIN, and the timers emit every
pending match (the sentinel's own matches are dropped). Timed from the query's start to the micro-batch that ran under
that watermark.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench.patterns._maritime import _TYPES, _fmt
from moirae.sources.maritime import COLUMNS

SENTINEL = "~end"
_SPARK_TYPES = {"string": "string", "timestamp[ms]": "timestamp", "bool": "boolean"}


def ddl() -> str:
    """The CSV's Spark schema."""
    return ", ".join(f"`{c}` {_SPARK_TYPES[_TYPES[c]] if c in _TYPES else 'double'}" for c in COLUMNS)


def _sentinel_line(last: pd.Timestamp) -> str:
    vals = []
    for c in COLUMNS:
        kind = _TYPES.get(c)
        vals.append(SENTINEL if c == "vessel_id" else _fmt(last + pd.Timedelta(days=1)) if c == "ts"
                    else "none" if kind == "string" else "false" if kind == "bool" else "0")
    return ",".join(vals) + "\n"


def _naive(t: pd.Timestamp) -> pd.Timestamp:
    return t.tz_convert("UTC").tz_localize(None) if t.tzinfo else t


def session(shuffle_partitions: int = 2):
    """A local Spark session on 2 cores (the test suite's settings)."""
    from moirae.runtime.spark import spark_session

    return spark_session(master="local[2]", app_name="moirae-bench-patterns", shuffle_partitions=shuffle_partitions)


def spark_matches(spark, path: Path, patterns: list[tuple[str, str]], last: pd.Timestamp,
                  timeout: float = 1800.0) -> tuple[float, list[tuple[str, str, str, str]]]:
    """(seconds, matches as ``(pattern, vessel_id, start_ts, end_ts)``) of ``patterns``
    run live in Spark over the CSV ``path`` whose last row's time is ``last``."""
    from pyspark.sql import functions as F

    from ananke.query import ProvQuery
    from moirae.patterns.spark_operator import compile_live, pattern_set_stream, rocksdb_start

    tmp = Path(tempfile.mkdtemp(prefix="moirae-bench-patspark-"))
    inbox, ck = tmp / "in", tmp / "ck"
    inbox.mkdir()
    shutil.copyfile(path, inbox / "a_rows.csv")
    (inbox / "z_end.csv").write_text(_sentinel_line(last))
    got: list = []
    try:
        df = (spark.readStream.schema(ddl()).option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSS")
              .csv(str(inbox)).withWatermark("ts", "1 second"))
        pq = ProvQuery()
        payload = [c for c in COLUMNS if c != "ts"]
        inp = pq.source(df, "vessels", "ts", cols=payload)
        cps = [compile_live(name, sql, df.schema, "ts") for name, sql in patterns]
        s = pattern_set_stream(inp, cps, tag="pattern", stream="vessels", payload=payload)
        out = s.df.select(F.col("pattern"), F.col("vessel_id"), F.col("start_ts"), F.col("end_ts"))

        def collect(batch, _batch_id: int) -> None:
            got.extend(tuple(r) for r in batch.collect())

        target = last + pd.Timedelta(days=1) - pd.Timedelta(seconds=1)
        t0 = time.perf_counter()
        with rocksdb_start(spark):
            q = (out.writeStream.foreachBatch(collect).option("checkpointLocation", str(ck))
                 .trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + timeout
            while True:
                wm = ((q.lastProgress or {}).get("eventTime") or {}).get("watermark")
                if wm and _naive(pd.Timestamp(wm)) >= _naive(target):
                    break
                if q.exception() is not None:
                    raise RuntimeError(f"the Spark pattern query failed: {q.exception()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Spark pattern query did not finish within {timeout:g} s")
                time.sleep(0.05)
            secs = time.perf_counter() - t0
            spark_matches.progress = [(p["batchId"], p["numInputRows"], p.get("durationMs")) for p in q.recentProgress]
        finally:
            q.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    matches = [(p, str(v), _fmt(s), _fmt(e)) for p, v, s, e in got if v != SENTINEL]
    return secs, matches
