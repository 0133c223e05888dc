"""Window provenance resolved from the archive (``ananke.window_provenance: archive``,
ananke.digest) in the live engine: the event-query's window keeps only the count and XOR
of its source-tuple ids in Spark, and the provenance graph ANK-1 writes is the one the
list in Spark's state gives (``state``), edge for edge, with the same source-tuple times
and expired labels, on the same input."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from archive import Database
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def _run(spark, db: Database, tmp_path, mode: str, parts: list[pd.DataFrame]):
    folder = tmp_path / f"in_{mode}"
    folder.mkdir()
    engine = make_engine(db, tmp_path / f"data_{mode}", spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0},
                         ananke={"window_provenance": mode})
    try:
        df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
        engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        flow = engine.deploy.flows["overload"]
        assert (flow.sink.digest is not None) == (mode == "archive")
        assert (flow.resolver is not None) == (mode == "archive")
        engine.start()
        for i, part in enumerate(parts):
            part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                                   header=False)
        want = sc.expected_events(pd.concat(parts))
        assert want
        g = flow.graph

        def graph():
            with db.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT s.payload ->> 'eid', e.source_id, v.tuple_ts FROM {g.e} e "
                            f"JOIN {g.v} s ON s.kind = 'sink' AND s.id = e.sink_id "
                            f"JOIN {g.v} v ON v.kind = 'source' AND v.id = e.source_id")
                return {(r[0], r[1], r[2]) for r in cur.fetchall()}

        sc.wait(lambda: {r[0] for r in graph()} >= want, what=f"edges of every live event ({mode})")
        sc.wait(lambda: flow.horizon() is not None, what="a horizon")
        # the labels follow the watermark: compare them at the input's final one (its
        # newest reading less the 30 s lateness), whichever run got there first
        final = pd.concat(parts)["ts"].max().to_pydatetime() - pd.Timedelta(seconds=30)
        sc.wait(lambda: (flow.emitted_below() or final - pd.Timedelta(days=1)) >= final,
                what=f"the final watermark ({mode})")
        flow.horizon()  # ANK-1 takes that watermark and labels what it expires
        edges = graph()
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT vertex_id FROM {g.lab} WHERE kind = 'source'")
            labels = {r[0] for r in cur.fetchall()}
            cur.execute(f"SELECT count(*) FROM {g.e} e LEFT JOIN metrics m ON m._sid = e.source_id "
                        "WHERE m._sid IS NULL")
            dangling = cur.fetchone()[0]
        status = engine.live_status()["event_queries"]["overload"]
    finally:
        engine.close()
    return want, edges, labels, dangling, status


def test_archive_resolved_window_provenance_equals_the_state_list(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    parts = sc.live()
    other = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    try:
        want, digest_edges, digest_labels, dangling, status = _run(spark, pg, tmp_path, "archive", parts)
        want2, list_edges, list_labels, _, status2 = _run(spark, other, tmp_path, "state", parts)
    finally:
        other.drop_schema()
        other.close()
    assert want == want2
    # every reading of each overloaded window, once, with its own time, as the list gives
    live = pd.concat(parts)
    for eid in want:
        _, sid, end = eid.split(":")
        win_end = pd.Timestamp(end, tz="UTC").ceil("5min")
        readings = live[(live["sid"] == sid) & (live["ts"] >= win_end - pd.Timedelta(minutes=5))
                        & (live["ts"] < win_end)]
        mine = {(s, t) for e, s, t in digest_edges if e == eid}
        assert sorted(t for _, t in mine) == sorted(t.to_pydatetime() for t in readings["ts"])
    assert digest_edges == {e for e in list_edges if e[0] in want}
    assert digest_labels & {s for _, s, _ in digest_edges} == list_labels & {s for _, s, _ in list_edges}
    assert dangling == 0
    prov = status["window_provenance"]
    assert prov["windows"] >= len(want) and prov["unmatched"] == 0, prov
    assert "window_provenance" not in status2
