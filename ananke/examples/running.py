"""The paper's running example (A 1-2, Figures 1 and 3).

Cars report ``(ts, car, x, y, speed)`` every 5 minutes into source ``cars``.

- Q1 (sink ``K1``): F1 keeps reports inside region R, A1 counts each car's reports in
  15-minute tumbling windows, F2 keeps counts above 2 (a car that stayed in R all window).
- Q2 (sink ``K2``): A2 averages each car's speed over the last 15 minutes (sliding, 5-minute
  advance), F3 keeps means above 110 km/h.

Both sinks have U_K = 15 minutes, so U = 15 minutes.
"""

from __future__ import annotations

from datetime import timedelta

from ananke.query import ProvQuery, ProvSink

SCHEMA = "ts timestamp, car long, x double, y double, speed double"
REGION = (0.0, 10.0, 0.0, 10.0)  # x0, x1, y0, y1
WINDOW = timedelta(minutes=15)
ADVANCE = timedelta(minutes=5)


def build(query: ProvQuery, reports, lateness: timedelta | str = "0 seconds") -> tuple[ProvSink, ProvSink]:
    """Instrument ``reports`` (a streaming DataFrame of SCHEMA) and return sinks K1, K2."""
    from pyspark.sql import functions as F

    src = query.source(reports, "cars", ts="ts", cols=["car", "x", "y", "speed"], lateness=lateness)
    x0, x1, y0, y1 = REGION
    inside = (F.col("x") >= x0) & (F.col("x") < x1) & (F.col("y") >= y0) & (F.col("y") < y1)
    k1 = (src.filter(inside, name="F1")
          .window(WINDOW, keys=["car"], aggs=[F.count(F.lit(1)).alias("n")], name="A1")
          .filter(F.col("n") > 2, name="F2")
          .sink("K1"))
    k2 = (src.window(WINDOW, ADVANCE, keys=["car"], aggs=[F.avg("speed").alias("mean_speed")], name="A2")
          .filter(F.col("mean_speed") > 110, name="F3")
          .sink("K2"))
    return k1, k2
