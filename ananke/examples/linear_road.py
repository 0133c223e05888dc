"""Linear Road (A 6, after the artifact's LinearRoadStoppedVehicles / Accident queries).

Vehicles report ``(ts, vid, speed, xway, lane, dir, seg, pos)`` every 30 s.

- Stopped (broken-down) vehicles, sink ``stopped``: reports with speed 0, counted per
  (vehicle, position) in 120 s windows sliding by 30 s; 4 reports (2 minutes standing at
  one position) make a stopped-vehicle tuple. U_stopped = 120 s.
- Accidents, sink ``accident``: stopped-vehicle tuples counted per position in 30 s
  tumbling windows; two or more distinct vehicles stopped at one position make an
  accident. U_accident = 120 s + 30 s = 150 s.

:func:`generate` makes a Linear-Road-like workload: vehicles driving along an expressway,
some breaking down (standing still for a few minutes), some pairs breaking down at the
same position (accidents).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ananke.query import ProvQuery, ProvSink

SCHEMA = "ts timestamp, vid long, speed double, xway int, lane int, dir int, seg int, pos long"
REPORT_EVERY = timedelta(seconds=30)
STOP_WINDOW, STOP_SLIDE, STOP_REPORTS = timedelta(seconds=120), timedelta(seconds=30), 4
ACCIDENT_WINDOW = timedelta(seconds=30)
START = datetime(2024, 1, 1, tzinfo=UTC)


def build(query: ProvQuery, reports, lateness: timedelta | str = "30 seconds") -> dict[str, ProvSink]:
    """Instrument ``reports`` (streaming, SCHEMA) and return sinks ``stopped`` and ``accident``."""
    from pyspark.sql import functions as F

    src = query.source(reports, "lr_reports", ts="ts", lateness=lateness)
    stopped = (src.filter(F.col("speed") == 0, name="zero-speed")
               .window(STOP_WINDOW, STOP_SLIDE, keys=["vid", "xway", "dir", "pos"],
                       aggs=[F.count(F.lit(1)).alias("reports")], name="stop-count")
               .filter(F.col("reports") >= STOP_REPORTS, name="stopped"))
    accident = (stopped.window(ACCIDENT_WINDOW, keys=["xway", "dir", "pos"],
                               aggs=[F.approx_count_distinct("vid").alias("vehicles")], name="accident-count")
                .filter(F.col("vehicles") >= 2, name="accident"))
    return {"stopped": stopped.sink("stopped"), "accident": accident.sink("accident")}


def generate(vehicles: int = 200, minutes: int = 30, breakdowns: int = 6, accidents: int = 2,
             seed: int = 7) -> list[dict]:
    """Reports of ``vehicles`` cars for ``minutes``, in event-time order.

    ``breakdowns`` cars stop for 3-5 minutes at some point; ``accidents`` pairs of cars stop
    together at one position for 3 minutes. Deterministic under ``seed``.
    """
    rng = random.Random(seed)
    steps = minutes * 60 // int(REPORT_EVERY.total_seconds())
    stops: dict[int, tuple[int, int]] = {}  # vid -> (first stopped step, last stopped step)
    for vid in rng.sample(range(vehicles), min(vehicles, breakdowns)):
        first = rng.randrange(0, max(1, steps - 10))
        stops[vid] = (first, first + rng.randint(6, 10))
    pairs = [v for v in range(vehicles) if v not in stops]
    rng.shuffle(pairs)
    shared_pos: dict[int, int] = {}
    for i in range(min(accidents, len(pairs) // 2)):
        a, b = pairs[2 * i], pairs[2 * i + 1]
        first = rng.randrange(0, max(1, steps - 8))
        stops[a] = stops[b] = (first, first + 6)
        shared_pos[a] = shared_pos[b] = rng.randrange(0, 500_000)
    pos = {v: rng.randrange(0, 500_000) for v in range(vehicles)}
    speed = {v: rng.uniform(40, 100) for v in range(vehicles)}
    rows = []
    for step in range(steps):
        ts = START + step * REPORT_EVERY
        for v in range(vehicles):
            first, last = stops.get(v, (-1, -2))
            standing = first <= step <= last
            if standing and v in shared_pos:
                pos[v] = shared_pos[v]
            s = 0.0 if standing else max(0.0, speed[v] + rng.gauss(0, 3))
            if not standing:
                pos[v] = (pos[v] + int(s * 30 * 1000 / 3600)) % 528_000
            rows.append({"ts": ts, "vid": v, "speed": s, "xway": v % 4, "lane": rng.randint(1, 3),
                         "dir": v % 2, "seg": pos[v] // 5280, "pos": pos[v]})
    return rows
