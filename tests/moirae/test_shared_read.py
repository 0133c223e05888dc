"""A source one event-query reads is archived by that query's own read
(``archive.shared_read``, :mod:`archive.shared`): one read, so the archive holds the very
tuples the query saw, even from a source that gives other values at each read."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from pyspark.sql import functions as F

import tests.moirae.scenario_small as sc
from archive import Database
from archive.shared import MARKER, claim, record_claim, shared_batch_id
from moirae import Engine
from moirae.engine.engine import EngineError
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def _engine(db: Database, data: str, shared: bool, target_rows: int = 0) -> Engine:
    return make_engine(db, data, spark={"trigger": "300ms"},
                       archive={"chunk_span": "30m", "chunk_target_rows": target_rows, "shared_read": shared})


def _source(spark, folder):
    # a source whose values differ at every read (like one sampling the machine): the
    # noise is far below the threshold, so the same windows overload either way
    df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
    return df.withColumn("bw", F.col("bw") + F.rand() * 1e-3)


def _run(spark, db: Database, tmp_path, shared: bool, parts: list[pd.DataFrame]):
    folder = tmp_path / f"in_{shared}"
    folder.mkdir()
    # 40 rows a chunk: the first batch's rate (60 rows in 10 minutes) gives 5-minute chunks
    engine = _engine(db, str(tmp_path / f"data_{shared}"), shared, target_rows=40)
    try:
        engine.source("metrics", _source(spark, folder), ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.start()
        src = engine.sources.by_name["metrics"]
        assert (src.query is None) == shared and (src.shared_by == "overload") == shared
        for i, part in enumerate(parts):
            part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                                   header=False)
        want = sc.expected_events(pd.concat(parts))
        flow = engine.deploy.flows["overload"]
        total = sum(len(p) for p in parts)

        def archived() -> int:
            with db.connection() as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM metrics")
                return cur.fetchone()[0]

        sc.wait(lambda: flow.resolver.status()["windows"] >= len(want) and archived() >= total,
                what=f"windows resolved and every row archived (shared={shared})")
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT sid, ts, bw FROM metrics")
            archive = pd.DataFrame(cur.fetchall(), columns=["sid", "ts", "bw"])
            cur.execute("SELECT eid, avg_bw FROM ev_overload")
            events = dict(cur.fetchall())
            cur.execute("SELECT array_agg(batch_id ORDER BY batch_id) FROM moirae_batches WHERE stream = 'ev_overload'")
            logged = cur.fetchone()[0] or []
            cur.execute("SELECT array_agg(DISTINCT _batch ORDER BY _batch) FROM ev_overload")
            ev_log = (logged, cur.fetchone()[0] or [], flow.streaming.lastProgress["batchId"] + 1)
            cur.execute("SELECT min(batch_id), count(*) FROM moirae_batches WHERE stream = 'metrics'")
            first_batch, batches = cur.fetchone()
            cur.execute("SELECT chunk_us FROM moirae_streams WHERE stream = 'metrics'")
            chunk_us = cur.fetchone()[0]
            cur.execute("SELECT to_regclass('metrics__stage') IS NOT NULL AND (SELECT count(*) = 0 FROM metrics__stage)"
                        if shared else "SELECT to_regclass('metrics__stage') IS NULL")
            stage_ok = cur.fetchone()[0]
        status = engine.live_status()
        marker = (engine.checkpoint_dir("metrics") / MARKER).exists()
    finally:
        engine.close()
    return want, archive, events, first_batch, batches, status, marker, chunk_us, stage_ok, ev_log


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "own-query"])
def test_the_archive_holds_the_tuples_the_event_query_saw(spark, pg, tmp_path, monkeypatch, shared):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    parts = sc.live()
    db = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    try:
        want, archive, events, first_batch, batches, status, marker, chunk_us, stage_ok, ev_log = _run(
            spark, db, tmp_path, shared, parts)
    finally:
        db.drop_schema()
        db.close()
    # every row archived once, whoever read it
    live = pd.concat(parts)
    assert len(archive) == len(live)
    assert sorted(zip(archive["sid"], archive["ts"], strict=True)) == sorted(
        zip(live["sid"], (t.to_pydatetime() for t in live["ts"]), strict=True))
    assert set(events) == want
    # the event stream's batch log holds the batches that detected events, and only them:
    # a batch without events is not logged (nothing to repeat), and some batches had none
    logged, with_events, ran = ev_log
    assert logged == with_events and logged and ran > len(logged), ev_log
    # the interval is chosen from the first batch's rate either way (a shared read stages
    # that batch, then empties the stage)
    assert chunk_us == 300_000_000 and stage_ok
    # the event's average against the average of the archived readings of its window
    for eid, avg_bw in events.items():
        _, sid, end = eid.split(":")
        win_end = pd.Timestamp(end, tz="UTC").ceil("5min")
        rows = archive[(archive["sid"] == sid) & (archive["ts"] >= win_end - pd.Timedelta(minutes=5))
                       & (archive["ts"] < win_end)]
        same = abs(rows["bw"].mean() - avg_bw) < 1e-9
        assert same == shared, (eid, rows["bw"].mean(), avg_bw)
    prov = status["event_queries"]["overload"]["window_provenance"]
    if shared:  # one read: every window digest matches the archive
        assert prov["unmatched"] == 0 and prov["windows"] >= len(want), prov
        assert first_batch >= 1 << 40 and batches >= len(parts)  # the query's batches, in their own id block
        assert marker
    else:  # two reads of the source: the archive holds other values than the window saw
        assert prov["unmatched"] >= len(want), prov
        assert first_batch < 1 << 40 and not marker


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: the engine's claims are the subject
def test_a_source_archived_by_a_query_read_cannot_silently_switch_reader(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    db = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    folder = tmp_path / "in"
    folder.mkdir()
    data = str(tmp_path / "data")
    try:
        first = _engine(db, data, shared=True)
        try:
            first.source("metrics", _source(spark, folder), ts="ts", indexes=[("sid",)])
            first.event_query("overload", sc.overload, inputs=["metrics"])
            assert first.sources.by_name["metrics"].shared_by == "overload"
        finally:
            first.close()
        again = _engine(db, data, shared=False)
        try:
            again.source("metrics", _source(spark, folder), ts="ts", indexes=[("sid",)])
            again.event_query("overload", sc.overload, inputs=["metrics"])
            with pytest.raises(EngineError, match="'overload'.*archive.shared_read"):
                again.start()
        finally:
            again.close()
        same = _engine(db, data, shared=True)  # the same owner takes it up again
        try:
            same.source("metrics", _source(spark, folder), ts="ts", indexes=[("sid",)])
            same.event_query("overload", sc.overload, inputs=["metrics"])
            assert same.sources.by_name["metrics"].shared_by == "overload"
        finally:
            same.close()
    finally:
        db.drop_schema()
        db.close()


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: the engine's claims are the subject
def test_a_query_that_fails_to_deploy_gives_its_source_back(spark, pg, tmp_path, monkeypatch):
    from moirae.queries.hybrid import QueryDefinitionError

    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    db = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    folder = tmp_path / "in"
    folder.mkdir()
    engine = _engine(db, str(tmp_path / "data"), shared=True)
    try:
        engine.source("metrics", _source(spark, folder), ts="ts", indexes=[("sid",)])
        with pytest.raises(QueryDefinitionError, match="no column 'eid'"):
            engine.event_query("broken", lambda m: sc.overload(m).select("sid", "ts"), inputs=["metrics"])
        assert engine.sources.by_name["metrics"].shared_by is None
        assert not (engine.checkpoint_dir("metrics") / MARKER).exists()
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        assert engine.sources.by_name["metrics"].shared_by == "overload"
    finally:
        engine.close()
        db.drop_schema()
        db.close()


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)
def test_a_source_registered_read_twice_keeps_its_own_archive_query(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    db = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    folders = [tmp_path / "in_a", tmp_path / "in_b"]
    for f in folders:
        f.mkdir()
    engine = _engine(db, str(tmp_path / "data"), shared=True)  # the engine's default: shared
    try:
        engine.source("metrics", _source(spark, folders[0]), ts="ts", indexes=[("sid",)], shared_read=False)
        engine.source("other", _source(spark, folders[1]), ts="ts", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.event_query("overload_other", sc.overload, inputs=["other"])
        assert engine.sources.by_name["metrics"].shared_by is None  # its own archive query, read again
        assert not (engine.checkpoint_dir("metrics") / MARKER).exists()
        assert engine.sources.by_name["other"].shared_by == "overload_other"  # the default still applies
    finally:
        engine.close()
        db.drop_schema()
        db.close()


def test_claims_and_batch_ids(tmp_path):
    ck = tmp_path / "ck"
    assert claim(ck, "a") is None  # nothing ever archived it
    record_claim(ck, "a")
    assert claim(ck, "a") is None and claim(ck, "b") == "a"
    other = tmp_path / "own"
    (other / "offsets").mkdir(parents=True)
    assert claim(other, "a") == "its own query"
    assert shared_batch_id("a", 3) != shared_batch_id("b", 3)
    assert shared_batch_id("a", 0) >= 1 << 40
