"""Materialization indexes what it writes (M 4.2 "Moirae can optionally
index the resulting materialized views"): after ``rematerialize`` rewrites an event
type's events and contexts, the Deploy Manager's background builder persists every
rewritten chunk's similarity index, with no event asking, and the first event's search
builds none of them."""

from __future__ import annotations

from datetime import timedelta

import pytest

import tests.moirae.scenario_small as sc
from moirae.materialize.replica import rematerialize
from recall.api import Interval, OutputKind
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

USERS_SCHEMA = "ts timestamp, sid string, user string"


def test_rematerialized_chunks_are_indexed_in_the_background(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    hist = sc.history()
    engine = make_engine(pg, tmp_path / "data",
                         archive={"chunk_span": "30m", "recent_chunks": 20})
    try:
        m = spark.readStream.schema(sc.SCHEMA).csv(str(tmp_path))
        u = spark.readStream.schema(USERS_SCHEMA).csv(str(tmp_path))
        engine.source("metrics", m, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.source("users", u, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.archiver.append("metrics", -1, hist, bulk=True)
        engine.archiver.append("users", -1, sc.users_history(hist), bulk=True)
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.context_query("overload", sc.users_context, inputs=["users"], name="users", window="5m")
        op = engine.similarity_recall("overload", k=3, name="similar")
        streams = [op.event_stream, *op.context_streams]
        assert engine.archiver.chunk_ids(streams) == []

        rematerialize(engine.materializer, "overload")
        assert engine.deploy.indexes.drain(timeout=120)
        chunks = sorted(engine.archiver.chunk_ids(streams))
        assert chunks, "the history must hold past overloads"
        assert engine.archiver.index_store("similar").chunk_ids() == chunks  # no event asked
        assert dict(op.source.built_chunks) == {c: 1 for c in chunks}
        assert engine.deploy.indexes.failed == 0

        event = {"eid": "live", "sid": "s1", "ts": hist["ts"].max().to_pydatetime() + timedelta(hours=1),
                 "context": [{"user": "backup"}]}
        state = op.start(op.task_for(event))
        out = []
        for c in sorted(chunks, reverse=True):                    # the first event's search, newest first
            out += op.on_chunk(state, c, Interval(*engine.archiver.grid_for(streams).bounds(c)),
                               op.fetch_chunk(state, c))
        assert op.source.builds == len(chunks)                     # it built nothing
        assert any(o.kind is OutputKind.INSERT and o.key != "__status__" for o in out)
    finally:
        engine.close()
    assert engine.deploy.indexes._thread is None                  # the worker stopped with the engine
