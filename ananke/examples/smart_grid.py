"""Smart Grid (A 6, after the artifact's SmartGridBlackout / SmartGridAnomaly queries).

Meters report ``(ts, meter, value)`` hourly (consumption in that hour).

The reading at 00:00 is not a consumption but the *compensation*: the meter's own total
for the day that just ended.

- Long blackout, sink ``blackout``: each meter's consumption (hours 1-23) summed per 24 h;
  meters with a zero day are counted per 24 h; more than ``min_meters`` of them make a
  blackout alert. U_blackout = 24 h + 24 h = 48 h.
- Anomaly, sink ``anomaly``: the day's sum per meter (24 h tumbling), kept when above
  ``limit``, is joined with the meter's midnight reading (the compensation reported at
  00:00, within 1 h after the day ends); a difference above ``limit`` is an anomaly.
  U_anomaly = 24 h + 1 h = 25 h.

:func:`generate` makes synthetic data like the artifact's SyntheticSmartGrid notebook:
meters x hours, each a sum of sinusoids (daily and weekly) plus noise, low values zeroed,
with injected blackouts (whole zero days) and anomalous midnight readings.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

from ananke.query import ProvQuery, ProvSink

SCHEMA = "ts timestamp, meter long, value double"
DAY = timedelta(hours=24)
JOIN_BOUND = timedelta(hours=1)
START = datetime(2024, 1, 1, tzinfo=UTC)


def build(query: ProvQuery, readings, min_meters: int = 0, limit: float = 200.0,
          lateness: timedelta | str = "1 hour") -> dict[str, ProvSink]:
    """Instrument ``readings`` (streaming, SCHEMA); return sinks ``blackout`` and ``anomaly``."""
    from pyspark.sql import functions as F

    src = query.source(readings, "sg_readings", ts="ts", lateness=lateness)
    hourly = src.filter(F.hour("ts") != 0, name="not-midnight")
    daily = hourly.window(DAY, keys=["meter"], aggs=[F.sum("value").alias("day_sum")], name="daily-sum")
    blackout = (daily.filter(F.col("day_sum") == 0, name="zero-day")
                .window(DAY, aggs=[F.count(F.lit(1)).alias("meters")], name="zero-meters")
                .filter(F.col("meters") > min_meters, name="blackout"))
    midnight = src.filter(F.hour("ts") == 0, name="midnight").select("meter", F.col("value").alias("midnight_value"))
    anomaly = (daily.filter(F.col("day_sum") > limit, name="big-day")
               .join(midnight, on=["meter"], lower=timedelta(0), upper=JOIN_BOUND, name="join")
               .with_column("diff", F.abs(F.col("day_sum") - F.col("midnight_value")), name="diff")
               .filter(F.col("diff") > limit, name="anomaly"))
    return {"blackout": blackout.sink("blackout"), "anomaly": anomaly.sink("anomaly")}


def generate(meters: int = 50, days: int = 4, blackouts: int = 3, anomalies: int = 4,
             seed: int = 11) -> list[dict]:
    """Hourly readings of ``meters`` for ``days``, in event-time order.

    ``blackouts`` (meter, day) pairs read zero all day; ``anomalies`` midnight readings are
    far off the previous day's sum. Deterministic under ``seed``.
    """
    rng = random.Random(seed)
    params = [(rng.uniform(8, 14), rng.uniform(3, 6), rng.uniform(1, 3), rng.uniform(0, 2 * math.pi))
              for _ in range(meters)]
    dark = {(rng.randrange(meters), rng.randrange(days)) for _ in range(blackouts)}
    odd = {(rng.randrange(meters), rng.randrange(1, max(2, days))) for _ in range(anomalies)}
    rows = []
    sums = [0.0] * meters
    for h in range(days * 24):
        ts = START + timedelta(hours=h)
        day = h // 24
        for m, (base, daily, weekly, phase) in enumerate(params):
            if h % 24 == 0:
                # midnight: the compensation, near the previous day's sum unless anomalous
                v = sums[m] * (rng.uniform(2.5, 4.0) if (m, day) in odd else rng.uniform(0.98, 1.02))
                sums[m] = 0.0
            elif (m, day) in dark:  # a dead meter: zero all day
                v = 0.0
            else:
                v = (base + daily * math.sin(2 * math.pi * h / 24 + phase)
                     + weekly * math.sin(2 * math.pi * h / 168) + rng.gauss(0, 1.0))
                v = 0.0 if v < 2.0 else round(v, 3)
            sums[m] += v if h % 24 else 0.0
            rows.append({"ts": ts, "meter": m, "value": float(v)})
    return rows
