"""Bad values in a live stream: source rows and events carrying text
PostgreSQL cannot hold (a NUL) are dead letters with the reason; the stream goes on,
the other events are detected, and the event log stores contexts safely."""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def test_a_nul_in_a_live_stream_is_dead_lettered_and_the_stream_goes_on(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    folder = tmp_path / "in"
    folder.mkdir()
    engine = make_engine(pg, tmp_path / "data",
                         spark={"trigger": "300ms"}, archive={"chunk_span": "30m", "chunk_target_rows": 0})
    parts = sc.live()
    bad = parts[1].copy()
    bad["sid"] = bad["sid"].where(bad["sid"] != "s1", "s1\x00x")  # a whole server's readings: an event too
    bad.loc[bad["sid"] == "s1\x00x", "bw"] = 99.0
    parts[1] = bad
    try:
        df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
        engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.start()
        for i, part in enumerate(parts):
            part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                                   header=False)
        good = pd.concat(parts)
        good = good[~good["sid"].str.contains("\x00")]
        want = sc.expected_events(good)
        assert want
        sc.wait(lambda: {e.eid for e in engine.deploy.events.list(limit=100)} >= want, what="the good events")
        sc.wait(lambda: engine.status()["totals"]["rows"] >= len(good), what="the good rows archived")
        sc.wait(lambda: len(engine.archiver.dead_letters("ev_overload")) >= 1, what="the bad event dead-lettered")
        assert all(q.isActive for q in spark.streams.active)  # nothing died
        dead_src = engine.archiver.dead_letters("metrics", limit=1000)
        dead_ev = engine.archiver.dead_letters("ev_overload")
        events = {e.eid for e in engine.deploy.events.list(limit=100)}
    finally:
        engine.close()
    assert len(dead_src) == int((bad["sid"] == "s1\x00x").sum())
    assert all("NUL character" in d["reason"] and "'sid'" in d["reason"] for d in dead_src + dead_ev)
    assert events == want  # the NUL server's overload is a dead letter, not an alert
