"""Replica2 on a real engine (M 4.3-4.4, fig. 8; moirae.materialize.replica2): a
Similarity Recall that runs out of materialized history re-processes the older raw
chunks through the same event- and context-queries, on Spark, and finds the past
incident that lies beyond the materialized span; what it re-processed is kept, so a
later alert re-processes nothing; two alerts at once re-process each unit once.

Real Spark and PostgreSQL. Four hours of readings (tests/moirae/scenario_small.py) in
30-minute chunks, only the newest two materialized: they hold the s2 overloads (cause
'miner'); the s1 overloads (cause 'backup') are three hours back, in raw chunks only.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from moirae.materialize.replica import Materializer
from recall.api import OutputKind
from recall.similarity_recall import STATUS_KEY
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow,
              pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]  # the PostgreSQL part: tests/recall


def _final(outs, eid):
    held = {}
    for o in sorted((o for o in outs if o.eid == eid and o.kind is not OutputKind.BOUNDARY), key=lambda o: o.seq):
        if o.kind is OutputKind.INSERT:
            held[o.key] = dict(o.row)
        elif o.kind is OutputKind.DELETE:
            held.pop(o.key)
    return held, held.pop(STATUS_KEY)


def test_an_incident_beyond_the_materialized_span_is_found_and_kept(spark, pg, tmp_path, monkeypatch):
    hist = sc.history()
    engine = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0, "recent_chunks": 2},
                         recall={"feedback_period": 1000})
    units: list[int] = []
    lock = threading.Lock()
    real = Materializer.materialize_range

    def counted(self, name, unit_ids):
        with lock:
            units.extend(unit_ids)
        return real(self, name, unit_ids)

    try:
        for d in ("m", "u"):
            (tmp_path / d).mkdir()
        m = spark.readStream.schema(sc.SCHEMA).csv(str(tmp_path / "m"))
        u = spark.readStream.schema("ts timestamp, sid string, user string").csv(str(tmp_path / "u"))
        engine.source("metrics", m, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.source("users", u, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.archiver.append("metrics", -1, hist, bulk=True)
        engine.archiver.append("users", -1, sc.users_history(hist), bulk=True)
        engine.archiver.age()
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.context_query("overload", sc.users_context, inputs=["users"], name="users", window="5m")
        engine.similarity_recall("overload", k=3, name="similar")
        mat = engine.materializer
        recent = mat.raw_chunks("overload", tiers=(engine.archiver.chunks("metrics")[0].tier.RECENT,))
        assert len(recent) == 2
        mat.rematerialize("overload", since=mat.unit_grid("overload").bounds(min(recent))[0])  # replica1's part
        monkeypatch.setattr(Materializer, "materialize_range", counted)

        mgr = engine.deploy.manager
        outs: list = []
        mgr.add_sink(outs.append)
        ts = pd.Timestamp("2024-03-01 04:10", tz="UTC").to_pydatetime()
        ctx = [{"user": "alice"}, {"user": "bob"}, {"user": "backup"}]

        def alert(eid: str, wait: bool = True) -> None:
            mgr.submit({"eid": eid, "ts": ts, "sid": "s0", "context": ctx}, ["similar"])
            if wait:
                sc.wait(lambda: any(o.kind is OutputKind.BOUNDARY and o.eid == eid for o in list(outs)),
                        timeout=180, what=f"the search of {eid}")

        alert("a", wait=False)  # two alerts at once: each unit is re-processed once
        alert("b")
        sc.wait(lambda: any(o.kind is OutputKind.BOUNDARY and o.eid == "a" for o in list(outs)), what="a")
        assert sorted(units) == sorted(set(units)) and len(units) == 6, units  # the six older units, once each
        for eid in ("a", "b"):
            held, status = _final(outs, eid)
            assert any(k.startswith("ov:s1:") for k in held), (eid, held)  # 3 h back, found
            assert status["status"] != "novel" and not status["novel"], status
            assert status["whole_archive"] is True and status["remaining_chunks"] == 0
            assert status["searched_back_to"] <= "2024-03-01T00:00:00+00:00"
            assert status["materialized_until"] == "2024-03-01T03:00:00+00:00"
        assert {t.eid: t.reprocessed_chunks for t in mgr.tasks() if t.operator == "similar"}.keys() >= {"a", "b"}
        assert sum(t.reprocessed_chunks for t in mgr.tasks() if t.operator == "similar") == 6

        alert("c")  # a later alert reads what was re-processed, as materialized
        assert len(units) == 6
        held_c, status_c = _final(outs, "c")
        assert status_c["reprocessed_chunks"] == 0 and status_c["whole_archive"] is True
        assert any(k.startswith("ov:s1:") for k in held_c), held_c
        # what was re-processed is archived: every past overload is in the event stream
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid FROM ev_overload")
            assert {r[0] for r in cur.fetchall()} == sc.expected_events(hist)
        view = next(t for t in mgr.tasks("c") if t.operator == "similar").as_dict()
        assert view["remaining_chunks"] == 0 and view["searched_back_to"] is not None
        assert timedelta(0) <= ts - pd.Timestamp(view["searched_back_to"]).to_pydatetime()
    finally:
        engine.close()
