"""Stopping the engine while several event-queries read a source one of them archives
(:mod:`archive.shared`): the other reads stop first, so every window they resolve still
finds its source tuples archived (:func:`moirae.deploy.manager.stop_waves`); a read that
runs on after the archiving one stopped says so when its windows come up short
(:meth:`moirae.ingest.archive_waits.ArchiveWaits.stopped_short`)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F

from moirae.deploy.manager import stop_order, stop_waves
from tests.engine_factory import make_engine
from tests.moirae.scenario_small import wait

T0_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
ROWS_PER_BATCH, ROWS_PER_S, KEYS = 400, 100, 4  # each micro-batch: 4 s of event time, two windows per key


def _metrics(spark):
    # every query's micro-batch n reads the same rows (event time from the row number):
    # the reads differ only in how far each has got
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH)
          .option("numPartitions", 1).load())
    ts = F.timestamp_micros(F.lit(T0_US) + F.expr(f"value * 1000000 div {ROWS_PER_S}"))
    return df.select(ts.alias("ts"), (F.col("value") % KEYS).cast("bigint").alias("sid"),
                     (F.col("value") % 7).cast("double").alias("bw"))


def _windows(m):
    """Every 2-second window of every key is an event (its provenance: a digest)."""
    w = m.window("2 seconds", keys=["sid"], aggs=[F.avg("bw").alias("avg_bw")], ts_out="ts")
    return (w.filter(F.col("avg_bw") >= 0)
             .with_column("eid", F.concat_ws(":", F.lit("w"), F.col("sid"), F.date_format("ts", "HHmmss"))))


def _started(pg, tmp_path, monkeypatch, spark):
    engine = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0, "shared_read": True})
    engine.source("metrics", _metrics(spark), ts="ts", lateness="1 second", indexes=[("sid",)])
    engine.event_query("owner", _windows, inputs=["metrics"])
    engine.event_query("reader", _windows, inputs=["metrics"])
    assert engine.sources.by_name["metrics"].shared_by == "owner"  # the first deployed archives it
    engine.start()
    owner, reader = engine.deploy.flows["owner"], engine.deploy.flows["reader"]
    wait(lambda: min(owner.resolver.stats["windows"], reader.resolver.stats["windows"]) >= 4 * KEYS, 120,
         "both queries resolving windows")
    return engine, owner, reader


def _archived_upto(engine):
    """How far the archive of ``metrics`` reached (by the archive waits' account)."""
    return datetime.fromisoformat(engine.sources.waits.status()["archived_upto"]["metrics"])


def _run_past(reader, upto) -> None:
    """Wait until ``reader`` has emitted (and resolved) a window ending after ``upto``."""
    edge = upto + timedelta(seconds=3)  # a whole window past the last archived tuple
    wait(lambda: (wm := reader.emitted_below()) is not None and wm >= edge, 120,
         f"the reader's windows past {upto}")


class _Flow:
    def __init__(self, name: str, inputs: list[str], archives: tuple[str, ...] = ()) -> None:
        self.name, self.query = name, type("Q", (), {"inputs": inputs})()
        self.shared = [type("S", (), {"stream": s})() for s in archives]


def test_stop_order_puts_each_archiving_read_after_the_other_reads_of_its_source():
    def order(*flows):
        return [f.name for f in stop_order(list(flows))]

    assert order(_Flow("a", ["m"], ("m",)), _Flow("b", ["m"]), _Flow("c", ["u"], ("u",))) == ["b", "c", "a"]
    waves = stop_waves([_Flow("a", ["m"], ("m",)), _Flow("b", ["m"]), _Flow("c", ["u"], ("u",)), _Flow("d", ["m"])])
    assert [[f.name for f in w] for w in waves] == [["b", "c", "d"], ["a"]]  # a's readers together, before it
    assert order(_Flow("a", ["m"], ("m",)), _Flow("b", ["m", "u"], ("u",)), _Flow("c", ["u"])) == ["c", "b", "a"]
    assert order(_Flow("a", ["m"]), _Flow("b", ["u"])) == ["a", "b"]  # no shared read: as deployed
    # a cycle (each archives what the other reads) cannot be ordered: as deployed
    assert order(_Flow("a", ["m", "u"], ("m",)), _Flow("b", ["u", "m"], ("u",))) == ["a", "b"]


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)
@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_the_engine_stops_the_archiving_read_last(spark, pg, tmp_path, monkeypatch):
    engine, owner, reader = _started(pg, tmp_path, monkeypatch, spark)
    stop = owner.stop

    def owner_stop(grace=None):
        # as when the archiving read's stop takes its grace: any read still running goes on
        stop(grace)
        if reader.streaming is not None:
            _run_past(reader, _archived_upto(engine))

    owner.stop = owner_stop
    try:
        engine.stop()
        assert reader.stopped and owner.stopped
        # every window either query resolved found its source tuples archived
        assert reader.resolver.stats["unmatched"] == 0, reader.resolver.stats
        assert owner.resolver.stats["unmatched"] == 0, owner.resolver.stats
        assert reader.resolver.stats["windows"] >= 4 * KEYS
    finally:
        engine.close()


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)
@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_a_read_outliving_the_archiving_one_says_why_its_windows_are_short(spark, pg, tmp_path, monkeypatch,
                                                                             caplog):
    engine, owner, reader = _started(pg, tmp_path, monkeypatch, spark)
    try:
        with caplog.at_level(logging.WARNING, logger="moirae.ingest.window_provenance"):
            owner.stop()  # alone: the reader runs on, past what the archive holds
            upto = _archived_upto(engine)
            assert engine.sources.waits.stopped_short(["metrics"], upto + timedelta(seconds=1)) == {"metrics": upto}
            assert engine.sources.waits.stopped_short(["metrics"], upto) == {}
            _run_past(reader, upto)
        assert reader.resolver.stats["unmatched"] > 0
        lines = [r.getMessage() for r in caplog.records if "provenance of the window" in r.getMessage()]
        assert lines and all("the archive of 'metrics' stopped short of the window's end" in x for x in lines), lines
        assert not any("stamped with the query's own clock" in x for x in lines), lines
    finally:
        engine.close()
