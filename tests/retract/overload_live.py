"""The small bandwidth-overload scenario (:mod:`tests.moirae.scenario_small`) live on a
real engine, for the end-to-end retraction tests: its day of history archived, the
overload event-query deployed (with a norm Recall when ``recall_sql`` is given), and its
live part fed as CSV files until every expected overload is in the event log."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

import tests.moirae.scenario_small as sc
from tests import engine_factory


def start(spark, pg, tmp_path, monkeypatch, recall_sql: str | None = None, history: pd.DataFrame | None = None):
    """A started engine reading CSV files from ``tmp_path / "in"``; returns ``(engine, folder)``.
    The caller closes the engine."""
    folder = tmp_path / "in"
    folder.mkdir()
    recall = {"recall": {"feedback_period": 100}} if recall_sql else {}
    engine = engine_factory.make_engine(
        pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
        archive={"chunk_span": "30m", "chunk_target_rows": 0, "recent_chunks": 4}, **recall)
    try:
        df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
        engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.archiver.append("metrics", 0, sc.history(360) if history is None else history, bulk=True)
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        if recall_sql:
            engine.recall("overload", recall_sql, name="norm", period=timedelta(days=1), time_column="h.ts",
                          extrapolate=False)
        engine.start()
    except BaseException:
        engine.close()
        raise
    return engine, folder


def feed(engine, folder) -> tuple[list[pd.DataFrame], list[str]]:
    """Write the live part's files; wait for every overload it holds. Returns the parts
    and the overloads' eids, sorted."""
    parts = sc.live()
    for i, part in enumerate(parts):
        part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                             header=False)
    want = sc.expected_events(pd.concat(parts))
    sc.wait(lambda: {e.eid for e in engine.events.list(limit=100)} >= want, what="live overloads")
    return parts, sorted(want)
