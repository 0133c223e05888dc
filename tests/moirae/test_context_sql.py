"""SQL context-queries (M 3.3).

Real Spark (file sources) and PostgreSQL. A SQL context-query must give each event the
same context as the Spark function of the same query, live (including a context input
that lags the event's input) and through :func:`compute_context` (the path batch
re-materialization takes); bad definitions are refused naming the query; the statement
timeout and read-only rules of history-queries hold.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from archive import Tier
from archive.history import HistoryQueryTimeout
from archive.types import UnsupportedType
from moirae.queries.context import compute_context
from moirae.queries.hybrid import QueryDefinitionError
from tests.engine_factory import make_engine
from tests.moirae.test_context_wait import _csv, _until, overload, users_context

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

T0 = datetime(2024, 3, 1, tzinfo=UTC)
USERS_SQL = ('SELECT DISTINCT e.eid, e.ts, u."user" FROM events e JOIN users u '
             "ON u.sid = e.sid AND u.ts <= e.ts AND u.ts > e.ts - interval '30 seconds'")


def _engine(spark, pg, tmp_path, monkeypatch, **archive):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    for d in ("metrics", "users"):
        (tmp_path / d).mkdir(exist_ok=True)
    engine = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "500ms"},
                         archive={"chunk_span": "10m", "chunk_target_rows": 0, **archive})
    metrics = spark.readStream.schema("ts timestamp, sid string, bw double").csv(str(tmp_path / "metrics"))
    users = spark.readStream.schema("ts timestamp, sid string, user string").csv(str(tmp_path / "users"))
    engine.source("metrics", metrics, ts="ts", lateness="1 second", indexes=[("sid",)])
    engine.source("users", users, ts="ts", lateness="1 second", indexes=[("sid",)])
    engine.event_query("overload", overload, inputs=["metrics"])
    return engine


def _pairs(frame: pd.DataFrame) -> set[tuple[str, str]]:
    return set(zip(frame["eid"], frame["user"], strict=True))


def test_sql_context_equals_the_spark_function_live_with_a_lagging_input(spark, pg, tmp_path, monkeypatch):
    engine = _engine(spark, pg, tmp_path, monkeypatch)
    try:
        engine.context_query("overload", users_context, inputs=["users"], name="by_spark", window="30s")
        cq = engine.context_query("overload", USERS_SQL, name="by_sql", window="30s")
        assert cq.inputs == ("users",) and cq.fn is None
        spec = engine.archiver.stream("cx_overload_by_sql")  # its schema, from PostgreSQL's result types
        assert dict(spec.columns) == dict(engine.archiver.stream("cx_overload_by_spark").columns)
        _csv(tmp_path / "users", "u0.csv", {"ts": [1.0, 2.0, 4.0], "sid": ["s1", "s2", "s1"],
                                            "user": ["alice", "bob", "alice"]})
        engine.start()
        _until("users archived", lambda: "users" in engine.live_status()["archived_upto"])
        _csv(tmp_path / "metrics", "m0.csv", {"ts": [2.0, 5.0, 9.0, 3.0, 60.0], "sid": ["s1", "s1", "s1", "s2", "s3"],
                                              "bw": [500.0, 500.0, 500.0, 900.0, 1.0]})
        _until("the engine waiting for users",
               lambda: [w for w in engine.live_status()["archive_waits"]["now"] if "users" in w["streams"]])
        # a user logged in just before the events, archived only while the engine waits
        _csv(tmp_path / "users", "u1.csv", {"ts": [9.5, 61.0], "sid": ["s1", "s1"], "user": ["mallory", "zed"]})
        events = _until("both events", lambda: (lambda ev: ev if len(ev) == 2 else None)(
            engine.deploy.events.list(event="overload")))
        by_eid = {e.eid: engine.deploy.events.get(e.eid) for e in events}
        s1 = next(r for r in by_eid.values() if r.attrs["sid"] == "s1")
        # both queries contribute: each user twice (once per context-query)
        assert sorted(t["user"] for t in s1.context) == ["alice", "alice", "mallory", "mallory"]
        window = (T0, T0 + timedelta(minutes=5))
        sql_rows = engine.archiver.read("cx_overload_by_sql", *window)
        spark_rows = engine.archiver.read("cx_overload_by_spark", *window)
        assert _pairs(sql_rows) == _pairs(spark_rows) == {(s1.eid, "alice"), (s1.eid, "mallory"),
                                                          (next(e for e in by_eid if e != s1.eid), "bob")}
        assert engine.live_status()["archive_waits"]["timed_out"] == 0

        # once the watermark is well past their chunk, the context streams leave the
        # present tier with the event stream (their present rows do not pile up)
        _csv(tmp_path / "metrics", "m1.csv", {"ts": [2000.0], "sid": ["s3"], "bw": [1.0]})
        flow = engine.deploy.flows["overload"]
        _until("the watermark past the first chunk",
               lambda: (h := flow.horizon()) is not None and h > T0 + timedelta(seconds=1000))
        engine.maintain_once()
        for stream in ("ev_overload", "cx_overload_by_sql", "cx_overload_by_spark"):
            assert engine.archiver.chunks(stream, Tier.PRESENT) == [], stream
            assert engine.archiver.chunks(stream, Tier.RECENT), stream
    finally:
        engine.close()


def test_sql_context_through_compute_context_as_rematerialization_runs_it(spark, pg, tmp_path, monkeypatch):
    """Many events at once, NULLs and a reserved-word column: the same rows as Spark."""
    engine = _engine(spark, pg, tmp_path, monkeypatch)
    try:
        by_spark = engine.context_query("overload", users_context, inputs=["users"], name="by_spark", window="30s")
        by_sql = engine.context_query("overload", USERS_SQL, name="by_sql", window="30s")
        rng = pd.Series(range(3000))
        users = pd.DataFrame({"ts": [pd.Timestamp(T0 + timedelta(seconds=int(s))) for s in rng * 7 % 3600],
                              "sid": [f"s{i % 13}" for i in rng], "user": [None if i % 17 == 0 else f"u{i % 5}"
                                                                          for i in rng]})
        engine.archiver.append("users", 0, users)
        ev = pd.DataFrame({"sid": [f"s{i % 13}" for i in range(120)],
                           "avg_bw": [None if i % 11 == 0 else 500.0 + i for i in range(120)],
                           "ts": [pd.Timestamp(T0 + timedelta(seconds=30 * i)) for i in range(120)],
                           "eid": [f"e{i}" for i in range(120)]})
        ev_spec = engine.archiver.stream("ev_overload")
        got_sql, _ = compute_context(spark, engine.archiver, by_sql, ev, ev_spec)
        got_spark, _ = compute_context(spark, engine.archiver, by_spark, ev, ev_spec)
        key = lambda f: sorted(zip(f["eid"], f["ts"], f["user"].fillna("<null>"), strict=True))  # noqa: E731
        assert len(got_sql) > 100 and key(got_sql) == key(got_spark)
        assert str(got_sql["ts"].dtype) == "datetime64[ns, UTC]" or "UTC" in str(got_sql["ts"].dtype)
    finally:
        engine.close()


@pytest.mark.parametrize(("sql", "inputs", "message"), [
    ("DELETE FROM users", None, "single SELECT, got DELETE"),
    ("SELECT e.eid, e.ts FROM events e JOIN nosuch n ON n.sid = e.sid", None, "unknown stream 'nosuch'"),
    ("SELECT e.eid, e.ts FROM events e JOIN users u ON u.sid = :sid", None, "may not use parameters (:sid)"),
    ("SELECT u.sid AS eid, u.ts FROM users u", None, "must read the relation 'events'"),
    (USERS_SQL, ["metrics"], "inputs ['metrics'] differ from the streams its SQL reads ['users']"),
    ("SELECT e.sid, e.ts FROM events e JOIN users u ON u.sid = e.sid", None, "must produce columns 'eid' and 'ts'"),
    ("WITH x AS (INSERT INTO users VALUES (1) RETURNING *) SELECT e.eid, e.ts FROM events e, x", None, "may only read"),
    ("SELECT e.eid, e.ts FROM events e JOIN users u ON u.sid = e.sid; SELECT 1", None, "single statement"),
])
def test_bad_sql_context_queries_are_refused_naming_the_query(spark, pg, tmp_path, monkeypatch, sql, inputs,
                                                              message):
    engine = _engine(spark, pg, tmp_path, monkeypatch)
    try:
        with pytest.raises(QueryDefinitionError, match="context-query 'bad' of 'overload'") as err:
            engine.context_query("overload", sql, inputs=inputs, name="bad")
        assert message in str(err.value)
        assert "bad" not in [c.name for c in engine.deploy.contexts.get("overload", [])]
    finally:
        engine.close()


def test_sql_context_result_types_and_function_inputs_are_checked(spark, pg, tmp_path, monkeypatch):
    engine = _engine(spark, pg, tmp_path, monkeypatch)
    try:
        with pytest.raises(UnsupportedType, match="result column 'tags'"):
            engine.context_query("overload", "SELECT e.eid, e.ts, ARRAY[u.sid] AS tags FROM events e "
                                             "JOIN users u ON u.sid = e.sid", name="arr")
        with pytest.raises(QueryDefinitionError, match="a function needs its inputs"):
            engine.context_query("overload", users_context, name="noinputs")
        with pytest.raises(QueryDefinitionError, match="must be a function or SQL text, got int"):
            engine.context_query("overload", 42, inputs=["users"], name="num")
    finally:
        engine.close()


def test_sql_context_runs_under_the_statement_timeout(spark, pg, tmp_path, monkeypatch):
    engine = _engine(spark, pg, tmp_path, monkeypatch, statement_timeout="300ms")
    try:
        cq = engine.context_query("overload", "SELECT e.eid, e.ts FROM events e JOIN users u ON u.sid = e.sid "
                                              "WHERE pg_sleep(2) IS NOT NULL", name="slow")
        engine.archiver.append("users", 0, pd.DataFrame({"ts": [pd.Timestamp(T0)], "sid": ["s1"], "user": ["a"]}))
        ev = pd.DataFrame({"sid": ["s1"], "avg_bw": [1.0], "ts": [pd.Timestamp(T0 + timedelta(seconds=1))],
                           "eid": ["e1"]})
        t0 = time.monotonic()
        with pytest.raises(HistoryQueryTimeout, match="context-query 'slow' of 'overload' exceeded 300 ms"):
            compute_context(spark, engine.archiver, cq, ev, engine.archiver.stream("ev_overload"))
        assert time.monotonic() - t0 < 1.9
    finally:
        engine.close()
