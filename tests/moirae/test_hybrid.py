"""Hybrid queries end to end on real Spark and PostgreSQL (M 3, 4.2-4.5).

A small fixed scenario: bulk history, then live CSV files; the bandwidth-overload
event-query (M fig. 1) with a standard Recall of the server's historical mean and
stddev (M fig. 2). Expected events come from a pandas computation of the same query;
the Recall's final answer from one SQL query over the same history.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from archive.materialized import materialized_chunks
from moirae.materialize.replica import rematerialize, tag_of
from recall.api import OutputKind
from tests import engine_factory

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

RECALL_SQL = ("SELECT h.sid, avg(h.bw) AS mean_bw, stddev(h.bw) AS sd_bw, count(*) AS n "
              "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def make_engine(tmp_path, pg, monkeypatch, spark, folder, **overrides):
    engine = engine_factory.make_engine(
        pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
        archive={"chunk_span": "30m", "chunk_target_rows": 0, "recent_chunks": 4}, recall={"feedback_period": 100},
        **overrides)
    df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
    engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
    return engine


wait = sc.wait


class Interrupt(Exception):
    pass


def interrupted_after(engine, n: int) -> None:
    """A rematerialization of ``overload`` interrupted after ``n`` units."""
    def stop(res, done, total):
        if done == n:
            raise Interrupt

    with pytest.raises(Interrupt):
        rematerialize(engine.materializer, "overload", on_chunk=stop)


def test_overload_events_recall_and_materialized_history(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    hist = sc.history()
    engine = make_engine(tmp_path, pg, monkeypatch, spark, folder)
    try:
        engine.archiver.append("metrics", 0, hist, bulk=True)
        engine.archiver.age()
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.recall("overload", RECALL_SQL, name="norm", period=timedelta(days=1), time_column="h.ts",
                      extrapolate=False)
        sub = engine.deploy.manager.bus.subscribe()
        engine.start()
        parts = sc.live()
        for i, part in enumerate(parts):
            out = part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
            out.to_csv(folder / f"p{i}.csv", index=False, header=False)
        live_all = pd.concat(parts)
        want_live = sc.expected_events(live_all)
        assert want_live, "the scenario must plant a live overload"
        wait(lambda: {e.eid for e in engine.deploy.events.list(limit=100)} >= want_live, what="live events")
        # every live event's recall ends (bounded by the archive's start) with a boundary
        wait(lambda: all(t.state.value in ("done",) for t in engine.deploy.manager.tasks()
                         if t.operator == "norm"), what="recall tasks to finish")
        items = [i for i in sub.drain() if not isinstance(i, dict)]
        recent_start = min(c.start for c in engine.archiver.chunks("metrics") if c.tier.value in ("recent", "present"))
        ev = {e: engine.deploy.events.get(e) for e in want_live}
    finally:
        engine.close()

    got_live = {e.eid for e in engine.deploy.events.list(limit=100)}
    assert got_live == want_live

    # The Recall's last revision equals one SQL query over all the server's history.
    eid = sorted(want_live)[0]
    sid = eid.split(":")[1]
    outs = [o for o in items if o.eid == eid and o.operator == "norm"]
    assert outs[0].kind is OutputKind.INSERT
    assert outs[-1].kind is OutputKind.BOUNDARY
    final = [o for o in outs if o.kind in (OutputKind.INSERT, OutputKind.UPDATE)][-1]
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT avg(bw), stddev(bw), count(*) FROM metrics WHERE sid = %s AND ts >= %s AND ts < %s",
                    (sid, ev[eid].ts - timedelta(days=1), ev[eid].ts))
        mean, sd, n = cur.fetchone()
    assert final.row["n"] == n
    assert final.row["mean_bw"] == pytest.approx(mean, rel=1e-9)
    assert final.row["sd_bw"] == pytest.approx(sd, rel=1e-9)
    # covered intervals only grow, newest first
    starts = [o.covered.start for o in outs if o.covered is not None]
    assert starts == sorted(starts, reverse=True)

    # The replica materialized the recent history: past overloads planted in the history.
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT eid FROM ev_overload WHERE _batch < 0")
        past = {r[0] for r in cur.fetchall()}
    want_past = {e for e in sc.expected_events(hist) if e.split(":")[2] >= recent_start.strftime("%Y%m%d%H%M%S")}
    assert want_past and want_past <= past


def test_rematerialize_twice_and_resume(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    hist = sc.history()
    engine = make_engine(tmp_path, pg, monkeypatch, spark, folder)
    try:
        engine.archiver.append("metrics", 0, hist, bulk=True)
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        interrupted_after(engine, 2)
        assert len(materialized_chunks(engine.archiver, "metrics", tag_of("overload"))) == 2
        resumed = rematerialize(engine.materializer, "overload", resume=True)
        total = len(engine.archiver.chunks("metrics"))
        assert len(resumed) == total - 2
        rematerialize(engine.materializer, "overload")  # a full re-run replaces, never duplicates
        tagged = materialized_chunks(engine.archiver, "metrics", tag_of("overload"))
        all_chunks = {c.chunk_id for c in engine.archiver.chunks("metrics")}
    finally:
        engine.close()
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT eid, count(*) FROM ev_overload GROUP BY eid")
        counts = dict(cur.fetchall())
    assert set(counts) == sc.expected_events(hist)
    assert set(counts.values()) == {1}
    assert tagged == all_chunks


@pytest.mark.parametrize("interval", [timedelta(hours=2), timedelta(minutes=5)], ids=["coarser-input", "finer-input"])
def test_rematerialize_with_the_input_on_its_own_chunk_interval(spark, pg, tmp_path, monkeypatch, interval):
    """Streams keep their own chunk intervals. The raw input on 2-hour (or
    5-minute) chunks, the event stream on 30-minute ones: materialization works per unit
    of the coarsest grid, each event lands in its own stream's chunk, an interrupted run
    resumes, and a re-run replaces without duplicating."""

    folder = tmp_path / "in"
    folder.mkdir()
    hist = sc.history()
    engine = make_engine(tmp_path, pg, monkeypatch, spark, folder)
    try:
        engine.archiver.register_stream(engine.archiver.stream("metrics"), chunk_interval=interval)
        engine.archiver.append("metrics", 0, hist, bulk=True)
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        unit = engine.materializer.unit_grid("overload").span
        assert unit == max(interval, timedelta(minutes=30))
        interrupted_after(engine, 1)
        resumed = rematerialize(engine.materializer, "overload", resume=True)
        units = {c.start.timestamp() // unit.total_seconds() for c in engine.archiver.chunks("metrics")}
        assert len(resumed) == len(units) - 1
        rematerialize(engine.materializer, "overload")  # a full re-run replaces, never duplicates
        tagged = materialized_chunks(engine.archiver, "metrics", tag_of("overload"))
        all_chunks = {c.chunk_id for c in engine.archiver.chunks("metrics")}
        ev_chunks = {c.chunk_id: (c.start, c.end) for c in engine.archiver.chunks("ev_overload")}
        assert all(end - start == timedelta(minutes=30) for start, end in ev_chunks.values())
    finally:
        engine.close()
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT eid, count(*), min(ts) FROM ev_overload GROUP BY eid")
        got = cur.fetchall()
    counts = {e: n for e, n, _ in got}
    assert set(counts) == sc.expected_events(hist)
    assert set(counts.values()) == {1}
    assert tagged == all_chunks
