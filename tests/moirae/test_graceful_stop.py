"""Stopping live queries between micro-batches (``spark.stop_grace``,
:mod:`moirae.runtime.graceful_stop`).

Real Spark and PostgreSQL: a batch made slow by a pandas UDF that sleeps is running when
the query, or the whole engine, is stopped. Within the grace the stop waits for it (its
rows are archived when ``Engine.stop`` returns); with no grace it interrupts it (nothing
of the batch is archived, and the next start replays it from the checkpoint)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from moirae.runtime.graceful_stop import stop_between_batches
from tests.engine_factory import make_engine
from tests.moirae.scenario_small import wait

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = datetime(2024, 3, 1, tzinfo=UTC)
SLOW_S = 4.0


def _slow_source(spark, folder, rows: int = 50):
    """A CSV file source whose every micro-batch takes about SLOW_S (a UDF sleeps)."""
    folder.mkdir()
    frame = pd.DataFrame({"ts": [(T0 + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(rows)],
                          "v": [float(i) for i in range(rows)]})
    frame.to_csv(folder.parent / "part.csv", index=False, header=False)
    (folder.parent / "part.csv").rename(folder / "part.csv")

    @pandas_udf("double")
    def slow(v: pd.Series) -> pd.Series:
        time.sleep(SLOW_S)
        return v

    return (spark.readStream.schema("ts timestamp, v double").csv(str(folder))
            .withColumn("v", slow(F.col("v"))))


def _running(query) -> bool:
    return bool(query.status.get("isTriggerActive"))


def test_a_stop_within_the_grace_lets_the_running_batch_finish(spark, tmp_path):
    done = []
    df = _slow_source(spark, tmp_path / "in")
    q = (df.writeStream.foreachBatch(lambda b, i: done.append((i, b.count())))
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    wait(lambda: _running(q), 90, "the slow batch to start")
    time.sleep(0.5)
    t0 = time.monotonic()
    assert stop_between_batches(q, grace_s=60) is True
    assert done == [(0, 50)], "the batch was cut short"
    assert not q.isActive
    assert time.monotonic() - t0 < 60


def test_no_grace_interrupts_the_running_batch_and_says_so(spark, tmp_path, caplog):
    done = []
    df = _slow_source(spark, tmp_path / "in")
    q = (df.writeStream.foreachBatch(lambda b, i: done.append((i, b.count())))
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    wait(lambda: _running(q), 90, "the slow batch to start")
    with caplog.at_level(logging.WARNING, logger="moirae.runtime.graceful_stop"):
        assert stop_between_batches(q, grace_s=0) is False
    assert not q.isActive
    assert done == []
    assert "in the middle of a micro-batch" in caplog.text


def test_a_stopped_query_is_stopped_at_once(spark, tmp_path):
    df = _slow_source(spark, tmp_path / "in")
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    q.stop()
    assert stop_between_batches(q, grace_s=60) is True


def _archived(engine, name: str) -> int:
    return len(engine.archiver.read(name, T0 - timedelta(days=1), T0 + timedelta(days=1)))


@pytest.mark.postgres
@pytest.mark.parametrize("grace", ["30s", "0s"])
@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: Spark's stop is the subject
def test_engine_stop_honours_spark_stop_grace(spark, pg, tmp_path, monkeypatch, grace):
    """``spark.stop_grace`` through the configuration: an engine stopped while its
    source's first batch runs has archived that batch when stop returns (30 s), or not
    (0 s: interrupted); a restart archives it then, once."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    e = make_engine(pg, tmp_path / "data",
                    spark={"trigger": "200ms", "stop_grace": grace},
                    archive={"chunk_span": "1h", "chunk_target_rows": 0})
    try:
        e.source("m", _slow_source(spark, tmp_path / "in"), ts="ts", lateness="1 minute")
        e.start()
        query = e.sources.by_name["m"].query
        wait(lambda: _running(query), 90, "the slow batch to start")
        time.sleep(0.5)
        e.stop()
        assert _archived(e, "m") == (50 if grace == "30s" else 0)
        e.start()  # from the checkpoint: an interrupted batch replays
        wait(lambda: _archived(e, "m") == 50, 90, "the batch archived after the restart")
        time.sleep(SLOW_S / 2)
        assert _archived(e, "m") == 50  # exactly once
    finally:
        e.close()
