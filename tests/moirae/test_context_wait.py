"""Contexts see every context input up to the event's time, even when that input lags
the event's own input; a wait that times out is counted, never ignored.

Real Spark (file sources) and PostgreSQL. The ``users`` file for the event's window is
written only once the engine is seen waiting for it, so without the wait the context
would miss it; the second event's users never arrive, and that wait's timeout is counted.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from pyspark.sql import functions as F

from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _csv(folder, name, rows):
    frame = pd.DataFrame(rows)
    frame["ts"] = [(T0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for s in frame["ts"]]
    tmp = folder.parent / f".{name}"
    frame.to_csv(tmp, index=False, header=False)
    tmp.rename(folder / name)  # atomic: the file source never sees half a file


def overload(m):
    w = m.window("10 seconds", keys=["sid"], aggs=[F.avg("bw").alias("avg_bw")], ts_out="ts")
    return w.filter(F.col("avg_bw") > 100).with_column("eid", F.concat_ws(":", F.col("sid"), F.col("ts")))


def users_context(events, users):
    e, u = events.alias("e"), users.alias("u")
    cond = ((F.col("e.sid") == F.col("u.sid")) & (F.col("u.ts") <= F.col("e.ts"))
            & (F.col("u.ts") > F.col("e.ts") - F.expr("INTERVAL 30 SECONDS")))
    return e.join(u, cond).select(F.col("e.eid").alias("eid"), F.col("e.ts").alias("ts"), "u.user").distinct()


def _until(what, cond, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def logins(u):
    """An event-query over ``users`` (which then archives it through its read)."""
    return u.filter(F.col("user") == "root").with_column("eid", F.concat_ws(":", F.col("sid"), F.col("ts")))


def _users_engine(spark, pg, tmp_path, sparse: bool, shared_users: bool = False):
    """An engine over two file sources, ``metrics`` (the overload event-query's input)
    and ``users`` (its context input, ``sparse`` as given; with ``shared_users`` also the
    input of a second event-query, ``logins``, whose read archives it), trigger 500 ms."""
    m_dir, u_dir = tmp_path / "metrics", tmp_path / "users"
    m_dir.mkdir()
    u_dir.mkdir()
    engine = make_engine(pg, tmp_path / "data",
                         spark={"trigger": "500ms"}, archive={"chunk_span": "10m", "chunk_target_rows": 0})
    try:
        metrics = spark.readStream.schema("ts timestamp, sid string, bw double").csv(str(m_dir))
        users = spark.readStream.schema("ts timestamp, sid string, user string").csv(str(u_dir))
        engine.source("metrics", metrics, ts="ts", lateness="1 second", indexes=[("sid",)])
        engine.source("users", users, ts="ts", lateness="1 second", indexes=[("sid",)], sparse=sparse)
        engine.event_query("overload", overload, inputs=["metrics"])
        if shared_users:
            engine.event_query("logins", logins, inputs=["users"])
        engine.context_query("overload", users_context, inputs=["users"], name="users", window="30s")
    except BaseException:
        engine.close()
        raise
    return engine, m_dir, u_dir


def _start_then_overload(engine, m_dir, u_dir) -> None:
    """Archive alice's login (1 s), start, then overload s1's window [0, 10): the row at
    60 s moves the watermark past it."""
    _csv(u_dir, "u0.csv", {"ts": [1.0], "sid": ["s1"], "user": ["alice"]})
    engine.start()
    _until("users archived", lambda: "users" in engine.live_status()["archived_upto"])
    _csv(m_dir, "m0.csv", {"ts": [2.0, 5.0, 9.0, 60.0], "sid": ["s1", "s1", "s1", "s2"],
                           "bw": [500.0, 500.0, 500.0, 1.0]})


def test_context_waits_for_a_lagging_context_input(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    engine, m_dir, u_dir = _users_engine(spark, pg, tmp_path, sparse=False)
    try:
        _start_then_overload(engine, m_dir, u_dir)

        def waiting_for_users():
            return [w for w in engine.live_status()["archive_waits"]["now"] if "users" in w["streams"]]

        _until("the engine waiting for users", waiting_for_users)
        # the lagging context input: a user logged in just before the event, archived only now
        _csv(u_dir, "u1.csv", {"ts": [9.5, 61.0], "sid": ["s1", "s1"], "user": ["mallory", "zed"]})
        eid1 = _until("the first event", lambda: engine.deploy.events.list(event="overload"))[0].eid
        first = engine.deploy.events.get(eid1)
        assert sorted(t["user"] for t in first.context) == ["alice", "mallory"]
        assert engine.live_status()["archive_waits"]["timed_out"] == 0

        # a second overload whose users never arrive: the wait times out and is counted
        _csv(m_dir, "m1.csv", {"ts": [72.0, 75.0, 200.0], "sid": ["s1", "s1", "s2"], "bw": [900.0, 900.0, 1.0]})
        _until("two events", lambda: len(engine.deploy.events.list(event="overload")) >= 2)
        waits = engine.live_status()["archive_waits"]
        assert waits["timed_out"] == 1 and waits["timeouts_by_stream"] == {"users": 1}
        assert engine.status()["live"]["archive_waits"]["timed_out"] == 1
    finally:
        engine.close()


@pytest.mark.parametrize("shared_users", [False, True], ids=["own_archive_query", "archived_by_an_event_query"])
def test_a_sparse_input_with_nothing_new_ends_the_wait_without_its_timeout(spark, pg, tmp_path, monkeypatch,
                                                                            shared_users):
    """A context input declared sparse whose file source has nothing new runs no batch
    at all (its offsets stand still); the wait asks Spark whether its archive query found
    nothing new at a tick after the events' and ends there, counted as caught up, not
    timed out (moirae.runtime.idle). The same input not declared sparse times out (above). An
    input archived by another event-query's read (archive.shared) is asked about through
    that event-query."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    engine, m_dir, u_dir = _users_engine(spark, pg, tmp_path, sparse=True, shared_users=shared_users)
    try:
        assert (engine.sources.by_name["users"].shared_by == "logins") is shared_users
        _start_then_overload(engine, m_dir, u_dir)
        eid = _until("the event", lambda: engine.deploy.events.list(event="overload"))[0].eid
        assert [t["user"] for t in engine.deploy.events.get(eid).context] == ["alice"]
        waits = engine.live_status()["archive_waits"]
        assert waits["timed_out"] == 0 and waits["timeouts_by_stream"] == {}
        assert waits["caught_up_idle"] >= 1
    finally:
        engine.close()


def test_a_wait_on_an_input_whose_archiving_read_stopped_ends_without_its_timeout(spark, pg, tmp_path, monkeypatch):
    """``users`` is archived by the read of the ``logins`` event-query (archive.shared).
    Once that query is stopped for good (as the engine's stop does, one flow after the
    other), nothing more of ``users`` will be archived: an ``overload`` event's context
    wait on it ends at once with what is archived, neither waiting out its timeout nor
    counted as one. Before, the stopped reader's input still counted as live."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    engine, m_dir, u_dir = _users_engine(spark, pg, tmp_path, sparse=False, shared_users=True)
    try:
        assert engine.sources.by_name["users"].shared_by == "logins"
        _csv(u_dir, "u0.csv", {"ts": [1.0], "sid": ["s1"], "user": ["alice"]})
        engine.start()
        _until("users archived", lambda: "users" in engine.live_status()["archived_upto"])
        engine.deploy.flows["logins"].stop()
        assert engine.sources.live(["users", "metrics"]) == ["metrics"]
        _csv(m_dir, "m0.csv", {"ts": [2.0, 5.0, 9.0, 60.0], "sid": ["s1", "s1", "s1", "s2"],
                               "bw": [500.0, 500.0, 500.0, 1.0]})
        eid = _until("the event", lambda: engine.deploy.events.list(event="overload"))[0].eid
        assert [t["user"] for t in engine.deploy.events.get(eid).context] == ["alice"]
        waits = engine.live_status()["archive_waits"]
        assert waits["timed_out"] == 0 and waits["timeouts_by_stream"] == {}
    finally:
        engine.close()


def test_events_archived_but_never_processed_are_recovered_at_start(spark, pg, tmp_path, monkeypatch):
    """A crash after Spark committed a batch, before the event worker processed it: the
    events are in ev_<name> but not in the event log; recovery processes them once."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    for d in ("metrics", "users"):
        (tmp_path / d).mkdir()
    engine = make_engine(pg, tmp_path / "data",
                         archive={"chunk_span": "10m", "chunk_target_rows": 0})
    try:
        metrics = spark.readStream.schema("ts timestamp, sid string, bw double").csv(str(tmp_path / "metrics"))
        users = spark.readStream.schema("ts timestamp, sid string, user string").csv(str(tmp_path / "users"))
        engine.source("metrics", metrics, ts="ts", lateness="1 second", indexes=[("sid",)])
        engine.source("users", users, ts="ts", lateness="1 second", indexes=[("sid",)])
        engine.event_query("overload", overload, inputs=["metrics"])
        engine.context_query("overload", users_context, inputs=["users"], name="users", window="30s")
        ts = pd.Timestamp(T0 + timedelta(seconds=10) - timedelta(microseconds=1))
        engine.archiver.append("users", 0, pd.DataFrame({"ts": [pd.Timestamp(T0 + timedelta(seconds=3))],
                                                         "sid": ["s1"], "user": ["alice"]}))
        engine.archiver.append("ev_overload", 7, pd.DataFrame({"sid": ["s1"], "avg_bw": [500.0], "ts": [ts],
                                                               "eid": ["s1:x"]}))
        assert engine.deploy.recover() == 1
        record = engine.deploy.events.get("s1:x")
        assert record is not None and [t["user"] for t in record.context] == ["alice"]
        assert engine.deploy.recover() == 0  # recorded now: never processed twice
    finally:
        engine.close()
