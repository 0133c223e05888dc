"""A monitor of one's own on hourly data, through the public Python API (README's
"Using it"): ``Engine.source`` over two ``moirae_replay`` streams replayed at several
days of data per second, a one-hour event-query, a Recall norm, a SQL context-query over
a sparse side stream that nothing else reads, and a Similarity Recall; a real engine.

It checks what a user of such data relies on: every row archived once (against the
file), a few hundred chunks per stream at most, every stream demoted, consecutive hourly
alerts of a key grouped into one incident, an alert's own incident never among its
similar ones (and an earlier incident listed once), a norm covering the whole archive,
a quiet stop, and a second run from the first run's checkpoints duplicating nothing."""

from __future__ import annotations

import logging
import time

import pandas as pd
import pytest

import tests.moirae.hourly_data as hd
from moirae.read.views import event_detail
from moirae.sources.spark_replay import register_replay_source
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

DAYS = 42
SPEEDUP = 6 * 86400  # six days of data per second
REACH = pd.Timedelta(hours=1 + 6, minutes=10)  # window + context window + lateness
LOUD = ("Traceback", "Error submitting job", "cannot schedule new futures")


def _replay(spark, path):
    return (spark.readStream.format("moirae_replay").option("path", str(path)).option("ts_col", "ts")
            .option("speedup", str(SPEEDUP)).load())


def _deploy(engine, spark, load_csv, side_csv):
    """The user's monitor, as the README writes it."""
    register_replay_source(spark)
    engine.source("load", _replay(spark, load_csv), ts="ts", lateness="10 minutes", indexes=[("key",)])
    engine.source("weather", _replay(spark, side_csv), ts="ts", lateness="10 minutes", indexes=[("key",)])
    engine.event_query("hot", hd.hot_hours, inputs=["load"])
    engine.recall("hot", hd.NORM_SQL, name="norm")
    engine.context_query("hot", hd.CONTEXT_SQL, name="weather", window="6h")
    engine.similarity_recall("hot", k=5, name="similar")


def _wait(cond, timeout: float, what: str, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; {state()}")


def _query(pg, sql, args=()):
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def _tiers(pg, stream):
    return dict(_query(pg, "SELECT tier, count(*) FROM moirae_chunks WHERE stream = %s GROUP BY tier", (stream,)))


def _spans(pg):
    return _query(pg, "SELECT stream, tier, count(*), min(end_ts - start_ts), max(end_ts - start_ts) "
                      "FROM moirae_chunks GROUP BY 1, 2 ORDER BY 1, 2")


def _done(engine, eid, operator, *also) -> bool:
    tasks = [t for t in engine.tasks(eid) if t.operator == operator]
    return bool(tasks) and all(t.state.value in ("done", *also) for t in tasks)


def _stop_quietly(engine, capfd, caplog) -> None:
    capfd.readouterr()
    if engine.started:
        engine.stop()
        # nothing of the engine's own is left to fire while the process exits (the traceback)
        assert not engine.deploy.periodic.running
    engine.close()
    err = capfd.readouterr().err
    assert not [w for w in LOUD if w in err], err[-3000:]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [f"{r.name}: {r.getMessage()}" for r in errors[:3]]


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)
def test_hourly_monitor_on_a_fast_replay(spark, pg, tmp_path, monkeypatch, capfd, caplog):
    caplog.set_level(logging.WARNING)
    load, side = hd.load_rows(DAYS), hd.side_rows(DAYS)
    load_csv, side_csv = hd.write_csv(load, tmp_path / "load.csv"), hd.write_csv(side, tmp_path / "side.csv")
    want = hd.expected_alerts(load)
    sections = {"spark": {"trigger": "500ms"}}

    engine = make_engine(pg, tmp_path / "data", monkeypatch, **sections)
    t0 = time.monotonic()
    try:
        _deploy(engine, spark, load_csv, side_csv)
        engine.start()
        _wait(lambda: engine.status()["totals"]["rows"] >= len(load) + len(side)
              and {e.eid for e in engine.events.list("hot", limit=1000)} >= set(want["eid"]),
              120, "the replay to be archived and every alert recorded",
              lambda: f"rows {engine.status()['totals']['rows']} of {len(load) + len(side)}, alerts "
                      f"{len({e.eid for e in engine.events.list('hot', limit=1000)})} of {len(want)}, "
                      f"live {engine.live_status()}")
        replayed = time.monotonic() - t0
        last = want.sort_values("end")["eid"].iloc[-1]
        # Similarity Recall ends, or pauses for feedback after its first chunks (M 4.4)
        _wait(lambda: _done(engine, last, "similar", "suspended"), 60, "the last alert's Similarity Recall",
              lambda: f"tasks {[(t.operator, t.state.value) for t in engine.tasks(last)]}, chunks {_spans(pg)}")
        t_norm = time.monotonic()
        try:  # the norm: a Recall over the whole archive, read one chunk per quantum
            _wait(lambda: _done(engine, last, "norm"), 30, "the last alert's norm to cover the whole archive",
                  lambda: f"tasks {[(t.operator, t.state.value) for t in engine.tasks(last)]}, chunks {_spans(pg)}")
            norm_missing = None
        except AssertionError as exc:
            norm_missing = str(exc)
        norm_s = time.monotonic() - t_norm
        detail = event_detail(engine, last)
        incidents, _ = engine.incidents.list(event="hot", limit=500)
        engine.maintain_once()
    finally:
        _stop_quietly(engine, capfd, caplog)

    # every row archived exactly once, compared with the files
    for stream, frame in (("load", load), ("weather", side)):
        n, distinct = _query(pg, f"SELECT count(*), count(DISTINCT (ts, key)) FROM {stream}")[0]
        assert n == distinct == len(frame), (stream, n, distinct, len(frame))
    assert float(_query(pg, "SELECT sum(value) FROM load")[0][0]) == pytest.approx(load["value"].sum(), abs=0.01)
    # a few hundred chunks at most per stream, and every stream leaves the present tier
    late: list[str] = []  # checked last, so that every other check has run when one fails
    for stream in ("load", "weather"):
        tiers = _tiers(pg, stream)
        if sum(tiers.values()) > 300:
            late.append(f"stream {stream} has {sum(tiers.values())} chunks (at most 300 wanted): {tiers}")
        # demoted: only chunks the horizon may not have passed yet are present, those
        # within the event-query's window, lateness and (for the side stream) the
        # context window of the data's end
        oldest_end = _query(pg, "SELECT min(end_ts) FROM moirae_chunks WHERE stream = %s AND tier = 'present'",
                            (stream,))[0][0]
        assert sum(v for t, v in tiers.items() if t != "present") >= 1, (stream, tiers)
        assert oldest_end is None or oldest_end > load["ts"].max() - REACH, (stream, tiers, oldest_end)

    # the alerts are the planted ones; each run of consecutive hourly alerts of a key is one incident
    got = {e.eid for e in engine.events.list("hot", limit=1000)}
    assert got == set(want["eid"])
    runs = want.assign(gap=want.groupby("key")["end"].diff() > pd.Timedelta(hours=1))
    runs["run"] = runs.groupby("key")["gap"].cumsum()
    expected_incidents = runs.groupby(["key", "run"]).agg(first=("eid", "min"), n=("eid", "size")).reset_index()
    assert sorted((i["id"], i["alerts"]) for i in incidents) == sorted(
        zip(expected_incidents["first"], expected_incidents["n"], strict=True))
    for inc in incidents:
        assert inc["duration_s"] == pytest.approx(inc["alerts"] * 3600, abs=1), inc

    # the latest alert's similar incidents: never its own, each earlier incident once
    own = detail["incident"]
    assert own == runs[runs["eid"] == last]["eid"].pipe(lambda s: expected_incidents.set_index(["key", "run"]).loc[
        tuple(runs[runs["eid"] == last][["key", "run"]].iloc[0]), "first"])
    similar = detail["similar"]
    assert similar, "no similar past incident"
    by_incident = engine.incidents.incident_of([s["eid"] for s in similar])
    seen = [by_incident.get(s["eid"], s["incident"]) for s in similar]
    assert own not in seen and own not in [s["incident"] for s in similar], similar
    assert len(seen) == len(set(seen)), seen
    k1_past = set(expected_incidents[(expected_incidents["key"] == "k1")]["first"]) - {own}
    assert set(seen[:len(k1_past)]) <= k1_past | set(expected_incidents["first"]), seen

    # the norm of the latest alert covers the whole archive
    if norm_missing is not None:
        late.append(norm_missing)
    else:
        norm = detail["results"]["norm"]
        covered = [pd.Timestamp(t) for t in norm["covered"]]
        end = want[want["eid"] == last]["end"].iloc[0]
        assert covered[0] <= load["ts"].min() and covered[1] >= end - pd.Timedelta(hours=1), covered
        key = last.split(":")[0]
        row = next(r["row"] for r in norm["current"] if r["row"].get("key") == key)
        of_key = load[load["key"] == key]
        assert len(of_key[of_key["ts"] < end - pd.Timedelta(hours=1)]) <= row["n"] <= len(of_key), row
    with capfd.disabled():
        print(f"\nreplayed in {replayed:.1f} s; the last alert's norm ended {norm_s:.1f} s after its similar "
              f"incidents; chunks {_spans(pg)}")

    # a second run from the first run's checkpoints duplicates nothing
    counts = {s: _query(pg, f"SELECT count(*) FROM {s}")[0][0] for s in ("load", "weather", "ev_hot")}
    engine = make_engine(pg, tmp_path / "data", monkeypatch, **sections)
    try:
        _deploy(engine, spark, load_csv, side_csv)
        engine.start()
        time.sleep(4)
        again = {s: _query(pg, f"SELECT count(*) FROM {s}")[0][0] for s in ("load", "weather", "ev_hot")}
        n_incidents = engine.incidents.list(event="hot", limit=500)[1]
    finally:
        _stop_quietly(engine, capfd, caplog)
    assert again == counts
    assert n_incidents == len(incidents)
    assert not late, late
