"""A contextual hybrid query deployed on a running engine (M 3.4, 4.2): its recent
history is materialized by the replica, and the first Similarity Recall returns past
events from before it was deployed, with their contexts."""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from recall.api import OutputKind
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

USERS_SCHEMA = "ts timestamp, sid string, user string"


wait = sc.wait


def _csv(frame, path):
    frame.assign(ts=frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(path, index=False, header=False)


def test_deployed_while_running_recalls_past_similar_events(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    m_dir, u_dir = tmp_path / "m", tmp_path / "u"
    m_dir.mkdir()
    u_dir.mkdir()
    hist = sc.history()
    engine = make_engine(pg, tmp_path / "data",
                         spark={"trigger": "300ms"}, archive={"chunk_span": "30m", "chunk_target_rows": 0, "recent_chunks": 20},
                         recall={"feedback_period": 100})
    try:
        m = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(m_dir))
        u = spark.readStream.schema(USERS_SCHEMA).option("maxFilesPerTrigger", 1).csv(str(u_dir))
        engine.source("metrics", m, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.source("users", u, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.archiver.append("metrics", -1, hist, bulk=True)
        engine.archiver.append("users", -1, sc.users_history(hist), bulk=True)
        engine.archiver.age()
        engine.start()  # running, with no query yet

        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.context_query("overload", sc.users_context, inputs=["users"], name="users", window="5m")
        engine.similarity_recall("overload", k=3, name="similar")
        past = sc.expected_events(hist)
        with pg.connection() as conn, conn.cursor() as cur:
            def materialized():
                cur.execute("SELECT count(DISTINCT eid) FROM ev_overload WHERE _batch < 0")
                return cur.fetchone()[0] >= len(past)
            wait(materialized, what="the replica to materialize past overloads")

        sub = engine.deploy.manager.bus.subscribe()
        live = [p.copy() for p in sc.live()]
        users_live = sc.users_history(pd.concat(live))
        for i, part in enumerate(live):
            _csv(part, m_dir / f"p{i}.csv")
        _csv(users_live, u_dir / "u0.csv")
        want = sc.expected_events(pd.concat(live))
        wait(lambda: {e.eid for e in engine.deploy.events.list(limit=50)} >= want, what="live events")
        eid = sorted(want)[0]
        wait(lambda: any(t.eid == eid and t.operator == "similar" and t.state.value in ("done", "suspended")
                         for t in engine.deploy.manager.tasks()), what="similarity task")
        items = [i for i in sub.drain() if not isinstance(i, dict) and i.eid == eid and i.operator == "similar"]
        record = engine.deploy.events.get(eid)
    finally:
        engine.close()

    assert {"user": "backup"} in record.context  # the live overload carries the planted cause
    inserts = [o for o in items if o.kind is OutputKind.INSERT and o.key != "__status__"]
    assert inserts, "Similarity Recall returned no past event"
    held = {}
    for o in items:
        if o.key == "__status__":
            continue
        if o.kind is OutputKind.INSERT:
            held[o.key] = o.row
        elif o.kind is OutputKind.DELETE:
            held.pop(o.key)
    assert 0 < len(held) <= 3
    # From before the query was deployed; the ones sharing the live event's cause (the s1
    # overloads, 'backup') rank above any other (the s2 ones, 'miner'), which with the
    # smooth IDF default may fill the list on the terms everyone shares, at a lower score.
    assert set(held) <= set(past)
    cause = {k: r for k, r in held.items() if k.split(":")[1] == "s1"}
    assert cause, held
    assert min(r["score"] for r in cause.values()) > max((r["score"] for k, r in held.items() if k not in cause),
                                                         default=0.0)
    for row in cause.values():
        assert {"user": "backup"} in row["context"]
        assert row["score"] > 0
        # why: the shared cause leads the explanation, and the shares add up to at most the score
        assert row["shared_terms"] and "user=backup" in [t["term"] for t in row["shared_terms"]]
        assert sum(t["share"] for t in row["shared_terms"]) <= row["score"] + 1e-6
