"""``ananke.variant: ankn`` runs ANK-N (A 5.2) in the live engine: the
provenance graph of a live event-query is written by ANK-N's own streaming query of
Spark operators, not by ANK-1, and it holds the same edges: each live event's source
tuples, each once, pointing at archived rows."""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: ANK-N's Spark operators are the subject
def test_ankn_variant_writes_the_live_provenance_graph(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    folder = tmp_path / "in"
    folder.mkdir()
    engine = make_engine(pg, tmp_path / "data",
                         spark={"trigger": "300ms"}, archive={"chunk_span": "30m", "chunk_target_rows": 0},
                         ananke={"variant": "ankn"})
    try:
        df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
        engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        flow = engine.deploy.flows["overload"]
        assert flow.variant == "ankn" and flow.ankn is not None and flow.logic is None and flow.adapter is None
        engine.start()
        parts = sc.live()
        for i, part in enumerate(parts):
            part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                                   header=False)
        want = sc.expected_events(pd.concat(parts))
        assert want
        sc.wait(lambda: {e.eid for e in engine.deploy.events.list(limit=100)} >= want, what="live events")
        g = flow.graph

        def edges():
            with pg.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT s.payload ->> 'eid', count(*), count(DISTINCT e.source_id) FROM {g.e} e "
                            f"JOIN {g.v} s ON s.kind = 'sink' AND s.id = e.sink_id GROUP BY 1")
                return {r[0]: (r[1], r[2]) for r in cur.fetchall()}

        sc.wait(lambda: set(edges()) >= want, what="ANK-N's edges of every live event")
        assert flow.ankn.items > 0 and flow.ankn_streaming is not None
        assert flow.horizon() is not None
        got = edges()
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {g.e} e LEFT JOIN metrics m ON m._sid = e.source_id "
                        "WHERE m._sid IS NULL")
            dangling = cur.fetchone()[0]
    finally:
        engine.close()
    live = pd.concat(parts)
    for eid in want:
        _, sid, end = eid.split(":")
        win_end = pd.Timestamp(end, tz="UTC").ceil("5min")
        readings = int(((live["sid"] == sid) & (live["ts"] >= win_end - pd.Timedelta(minutes=5))
                        & (live["ts"] < win_end)).sum())
        assert got[eid] == (readings, readings), (eid, got[eid], readings)  # every reading of the window, once
    assert dangling == 0  # every edge points at an archived source tuple
