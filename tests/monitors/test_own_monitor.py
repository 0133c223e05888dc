"""A monitor file written from scratch, for a data set this test generates (greenhouse
rooms, not the cluster scenario), deployed on a running engine: it raises alerts with
their context, their history (a Recall of the room's norm) and their similar past
incidents (a Similarity Recall over history materialized after the deploy, M 4.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moirae.materialize.replica import rematerialize
from moirae.monitors import deploy, loads
from recall.api import OutputKind
from tests.moirae.scenario_small import wait

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

MONITOR = """\
# A greenhouse room whose 5-minute mean temperature is above 30 C.
name: hot_room
description: A room overheats; who went in, what is normal for it, and when it happened before.
sources:
  temps:
    kind: file
    options: {{path: "{temps}", format: csv, maxFilesPerTrigger: 1}}
    schema: {{ts: timestamp, room: string, temp: double}}
    lateness: 30 seconds
    indexes: [[room]]
  doors:
    kind: file
    options: {{path: "{doors}", format: csv, maxFilesPerTrigger: 1}}
    schema: {{ts: timestamp, room: string, who: string}}
    lateness: 30 seconds
    indexes: [[room]]
    chunk_interval: 1 hour
event_query:
  sql: |
    SELECT room, window_time(window) AS ts, avg(temp) AS avg_temp,
           concat_ws(':', 'hot', room, date_format(window_time(window), 'yyyyMMddHHmmss')) AS eid
    FROM temps
    WHERE temp > -50
    GROUP BY window(ts, '5 minutes'), room
    HAVING avg(temp) > 30
contexts:
  - name: visitors
    sql: >-
      SELECT DISTINCT e.eid, e.ts, d.who FROM events e JOIN doors d
      ON d.room = e.room AND d.ts <= e.ts AND d.ts > e.ts - interval '5 minutes'
    window: 5m
recalls:
  - name: norm
    sql: >-
      SELECT h.room, avg(h.temp) AS mean_temp, stddev(h.temp) AS sd_temp, count(*) AS n
      FROM temps h WHERE h.room = :room GROUP BY h.room
    period: 1 day
    time_column: h.ts
similarity: {{name: similar, k: 3}}
incidents: {{keys: [room], window: 5 minutes, metric: avg_temp, threshold: 30, series: [temps, temp], norm: norm}}
"""

START = pd.Timestamp("2025-06-01", tz="UTC")


def history() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three hours of readings every 30 s from three rooms; r1 overheats twice with the
    heater technician inside, r2 once with the cleaner."""
    ts = pd.date_range(START, periods=3 * 120 * 3, freq="10s", tz="UTC")
    room = np.array([f"r{i % 3}" for i in range(len(ts))])
    temp = np.random.default_rng(3).normal(22, 1.5, len(ts))
    hot1 = (room == "r1") & (((ts.hour == 0) & (ts.minute >= 30) & (ts.minute < 40)) | ((ts.hour == 2) & (ts.minute < 10)))
    hot2 = (room == "r2") & (ts.hour == 1) & (ts.minute >= 15) & (ts.minute < 25)
    temp[hot1 | hot2] += 14
    temps = pd.DataFrame({"ts": ts, "room": room, "temp": temp})
    return temps, _doors(temps)


def _doors(temps: pd.DataFrame) -> pd.DataFrame:
    """Who is in each room, once a minute: the gardener everywhere, and whoever heats it."""
    hot = temps.assign(m=temps["ts"].dt.floor("min")).groupby(["room", "m"])["temp"].max() > 30
    rows = []
    for t in pd.date_range(temps["ts"].min().floor("min"), temps["ts"].max(), freq="1min", tz="UTC"):
        for r in ("r0", "r1", "r2"):
            rows.append((t, r, "gardener"))
            if hot.get((r, t), False):
                rows.append((t, r, "cleaner" if r == "r2" else "heater_tech"))
    return pd.DataFrame(rows, columns=["ts", "room", "who"])


def live() -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """Twenty live minutes after the history; r0 overheats in the middle, the heater
    technician inside."""
    ts = pd.date_range(START + pd.Timedelta(hours=3), periods=20 * 6 * 3, freq="10s", tz="UTC")
    room = np.array([f"r{i % 3}" for i in range(len(ts))])
    temp = np.full(len(ts), 22.0) + (np.arange(len(ts)) % 5) * 0.2
    temp[(room == "r0") & (ts >= START + pd.Timedelta(hours=3, minutes=5))
         & (ts < START + pd.Timedelta(hours=3, minutes=15))] = 37.0
    temps = pd.DataFrame({"ts": ts, "room": room, "temp": temp})
    parts = [temps.iloc[i:i + 90] for i in range(0, len(temps), 90)]
    return parts, _doors(temps)


def _csv(frame: pd.DataFrame, path) -> None:
    frame.assign(ts=frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(path, index=False)


def test_own_monitor_raises_alerts_with_context_history_and_similar_incidents(running_engine, tmp_path):
    engine = running_engine
    temps_dir, doors_dir = tmp_path / "temps", tmp_path / "doors"
    temps_dir.mkdir()
    doors_dir.mkdir()
    spec = loads(MONITOR.format(temps=temps_dir, doors=doors_dir), "hot_room.yaml")
    assert spec.version == loads(MONITOR.format(temps=temps_dir, doors=doors_dir) + "\n# a comment\n").version

    deploy(spec, engine)  # on the running engine
    assert engine.event_inputs("hot_room") == ("eid", ["temps"])
    assert engine.archive.grid_of("doors").span == pd.Timedelta(hours=1)  # its own, not chunk_span's 30m

    # the rooms' past, archived after the deploy, then materialized into past incidents (M 4.2)
    h_temps, h_doors = history()
    engine.archiver.append("temps", -1, h_temps, bulk=True)
    engine.archiver.append("doors", -1, h_doors, bulk=True)
    engine.archiver.age()
    rematerialize(engine.materializer, "hot_room", batch=16)
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT DISTINCT eid FROM ev_hot_room WHERE _batch < 0")
        past = {r[0] for r in cur.fetchall()}
    assert {e.split(":")[1] for e in past} == {"r1", "r2"}

    sub = engine.bus.subscribe()
    parts, doors = live()
    _csv(doors, doors_dir / "d0.csv")
    for i, part in enumerate(parts):
        _csv(part, temps_dir / f"t{i}.csv")
    wait(lambda: any(e.eid.startswith("hot:r0:") for e in engine.events.list(limit=50)), what="a live r0 alert")
    eid = sorted(e.eid for e in engine.events.list(limit=50) if e.eid.startswith("hot:r0:"))[0]
    wait(lambda: all(t.state.value in ("done", "suspended") for t in engine.tasks(eid)) and len(engine.tasks(eid)) == 2,
         what="the alert's Recall and Similarity Recall")
    items = [i for i in sub.drain() if not isinstance(i, dict) and i.eid == eid]

    record = engine.events.get(eid)
    assert {"who": "heater_tech"} in record.context  # its context
    norm = [o for o in items if o.operator == "norm" and o.kind in (OutputKind.INSERT, OutputKind.UPDATE)]
    assert norm and norm[-1].row["room"] == "r0" and 20 < norm[-1].row["mean_temp"] < 24  # its history
    held: dict[str, dict] = {}
    for o in items:
        if o.operator != "similar" or o.key == "__status__":
            continue
        if o.kind is OutputKind.INSERT:
            held[o.key] = o.row
        elif o.kind is OutputKind.DELETE:
            held.pop(o.key, None)
    assert held and set(held) <= past  # similar past incidents, from before the deploy
    best = max(held.values(), key=lambda r: r["score"])
    assert {"who": "heater_tech"} in best["context"]  # the one sharing its cause ranks first

    # Undeployed, it leaves nothing running (the lifecycle's half, moirae/deploy/lifecycle.py).
    # The first cycle opens the engine's lazily made connections: compare from the second.
    from moirae.deploy.lifecycle import leaks

    engine.undeploy_monitor("hot_room")
    before = engine.footprint()
    deploy(loads(MONITOR.format(temps=temps_dir, doors=doors_dir), "hot_room.yaml"), engine)

    def first_batch() -> bool:
        q = next((q for q in engine.spark.streams.active if q.name == "event_hot_room"), None)
        return q is not None and q.lastProgress is not None

    wait(first_batch, what="the redeployed monitor's first micro-batch")
    engine.undeploy_monitor("hot_room")
    assert "hot_room" not in {m["name"] for m in engine.monitors()}
    assert not {q.name for q in engine.spark.streams.active} & {"event_hot_room", "archive_temps", "archive_doors"}
    # slack 1: a Spark Python worker reused across the cycle keeps up to
    # archive.exec_sink.MAX_KEPT_CONNECTIONS archive connections of its own, and may open
    # its second one meanwhile (same application name, no new worker to count); held
    # connections of the monitor itself would be more than that
    assert not leaks(before, engine.footprint(), pool_slack=1)
