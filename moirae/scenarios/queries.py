"""The Moirae paper's example queries, shared by the scenarios (M fig. 1-4).

- ``overload`` (M fig. 1): a server's 5-minute average bandwidth above X.
- ``norm`` (M fig. 2): the server's historical mean and standard deviation of
  bandwidth over the last week, so alerts within the norm can be filtered out.
- contexts (M fig. 3): the logged-in users and running processes on the server at the
  time of the event; ``incidents`` as surrounding information (M 3.3): how the past
  incident on that server was resolved (not compared). The engine deploys them as SQL
  (one PostgreSQL read per batch, :mod:`moirae.queries.context_sql`); the Spark functions of
  the same queries are kept for engines that compute contexts in Spark.
- a Similarity Recall (M fig. 4) of the 5 most similar past overloads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from moirae.engine.engine import Engine

NORM_SQL = ("SELECT h.sid, avg(h.bw) AS mean_bw, stddev(h.bw) AS sd_bw, count(*) AS n "
            "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def overload_query(threshold: float, window: str = "5 minutes"):
    """M fig. 1 as an event-query function over the instrumented metrics stream."""

    def overload(metrics):
        w = metrics.window(window, keys=["sid"], aggs=[F.avg("bw").alias("avg_bw"), F.max("bw").alias("max_bw")],
                           ts_out="ts")
        return (w.filter(F.col("avg_bw") > threshold)
                 .with_column("eid", F.concat_ws(":", F.lit("ov"), F.col("sid"), F.date_format("ts", "yyyyMMdd'T'HHmm"))))

    return overload


def _valid_at_event(events, stream, column: str, before: str):
    """Tuples of ``stream`` on the event's server within ``before`` of the event."""
    e, s = events.alias("e"), stream.alias("s")
    cond = ((F.col("e.sid") == F.col("s.sid")) & (F.col("s.ts") <= F.col("e.ts"))
            & (F.col("s.ts") > F.col("e.ts") - F.expr(f"INTERVAL {before}")))
    return e.join(s, cond).select(F.col("e.eid").alias("eid"), F.col("e.ts").alias("ts"),
                                  F.col(f"s.{column}").alias(column)).distinct()


def users_context(events, users):
    """M fig. 3: the users logged in on the server at the event."""
    return _valid_at_event(events, users, "user", "2 minutes")


def procs_context(events, procs):
    """M fig. 3: the processes running on the server at the event."""
    return _valid_at_event(events, procs, "proc", "2 minutes")


def _valid_at_event_sql(stream: str, column: str, before: str) -> str:
    """:func:`_valid_at_event` as a SQL context-query."""
    return (f'SELECT DISTINCT e.eid, e.ts, s."{column}" FROM events e JOIN {stream} s '
            f"ON s.sid = e.sid AND s.ts <= e.ts AND s.ts > e.ts - interval '{before}'")


USERS_SQL = _valid_at_event_sql("users", "user", "2 minutes")
PROCS_SQL = _valid_at_event_sql("procs", "proc", "2 minutes")
RESOLUTION_SQL = ("SELECT e.eid, e.ts, i.kind, i.resolution FROM events e JOIN incidents i "
                  "ON i.sid = e.sid AND i.ts >= e.ts - interval '15 minutes' AND i.ts <= e.ts + interval '15 minutes'")


def resolution_surrounding(events, incidents):
    """How the incident on the server around the event was resolved (M 3.3)."""
    e, i = events.alias("e"), incidents.alias("i")
    cond = ((F.col("e.sid") == F.col("i.sid")) & (F.col("i.ts") >= F.col("e.ts") - F.expr("INTERVAL 15 MINUTES"))
            & (F.col("i.ts") <= F.col("e.ts") + F.expr("INTERVAL 15 MINUTES")))
    return e.join(i, cond).select(F.col("e.eid").alias("eid"), F.col("e.ts").alias("ts"), "i.kind", "i.resolution")


def deploy_queries(engine: Engine, threshold: float, incidents: bool = True) -> None:
    """Deploy the paper's three hybrid queries on an engine with metrics, users, procs
    (and incidents) sources."""
    engine.event_query("overload", overload_query(threshold), inputs=["metrics"])
    engine.recall("overload", NORM_SQL, name="norm", period=timedelta(days=7), time_column="h.ts")
    # consecutive windows of one server's overload are one incident (M 3.3), charted on metrics.bw
    engine.incidents.configure("overload", keys="sid", window=timedelta(minutes=5), metric="avg_bw",
                                      threshold=threshold, series=("metrics", "bw"), norm="norm")
    engine.context_query("overload", USERS_SQL, name="users", window="2m")
    engine.context_query("overload", PROCS_SQL, name="procs", window="2m")
    if incidents:
        engine.context_query("overload", RESOLUTION_SQL, name="resolution", window="15m", after="15m",
                             surrounding=True)
    # Results are past incidents; the ongoing overload's own earlier windows are its incident, never a result.
    engine.similarity_recall("overload", k=5, name="similar")
