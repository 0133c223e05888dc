"""The same event-query in Spark SQL and in Python gives the same alerts and the same
provenance (moirae/monitors/sqlquery.py; A 2.3, A 4).

Each hypothesis example builds small static frames, applies the SQL compiled onto the
instrumented operators and the hand-written Python function to them (the batch path
replicas take, :meth:`moirae.materialize.replica.Materializer.detect`, with provenance
on, the same wrappers the live query runs), and compares, per alert, every column and
the set of source tuples its provenance names, plus the operator graphs' U. The alerts
are also compared with what plain Spark SQL computes from the same text, so the compiler
keeps the SQL's meaning. One Spark job per example (the three results in one union).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from ananke.ids import PROV
from ananke.query import ProvQuery
from moirae.monitors import compile_sql

T0 = datetime(2026, 3, 1, tzinfo=UTC)
METRICS = "sid string, bw double, ts timestamp"
USERS = "sid string, user string, ts timestamp"

WINDOW_SQL = """
SELECT sid, window_time(window) AS ts, avg(bw) AS avg_bw, max(bw) AS max_bw,
       concat_ws(':', 'ov', sid, date_format(window_time(window), 'yyyyMMddHHmm')) AS eid
FROM metrics
WHERE bw >= 100
GROUP BY window(ts, '5 minutes'), sid
HAVING avg(bw) > 500 AND count(*) >= 2
"""


def window_py(metrics):
    """WINDOW_SQL with the operators, as a Python event-query is written."""
    w = (metrics.filter(F.col("bw") >= 100, name="where_metrics")
         .window("5 minutes", keys=["sid"], aggs=[F.avg("bw").alias("avg_bw"), F.max("bw").alias("max_bw"),
                                                  F.count(F.lit(1)).alias("n")], ts_out="ts"))
    w = w.filter((F.col("avg_bw") > 500) & (F.col("n") >= 2), name="having")
    return w.select("sid", "ts", "avg_bw", "max_bw",
                    F.concat_ws(":", F.lit("ov"), F.col("sid"), F.date_format("ts", "yyyyMMddHHmm")).alias("eid"),
                    name="select")


SLIDING_SQL = """
SELECT sid, window_time(window) AS ts, sum(bw) AS total, window.start AS since,
       concat_ws('/', sid, cast(window.start AS string)) AS eid
FROM metrics GROUP BY window(ts, '4 minutes', '2 minutes'), sid HAVING sum(bw) > 900
"""


def sliding_py(metrics):
    w = metrics.window("4 minutes", "2 minutes", keys=["sid"], aggs=[F.sum("bw").alias("total")], ts_out="ts",
                       bounds=True)
    w = w.filter(F.col("total") > 900, name="having")
    return w.select("sid", "ts", "total", F.col("window_start").alias("since"),
                    F.concat_ws("/", F.col("sid"), F.col("window_start").cast("string")).alias("eid"),
                    name="select")


JOIN_SQL = """
SELECT m.sid, greatest(m.ts, u.ts) AS ts, m.bw, u.user,
       concat_ws(':', m.sid, u.user, cast(m.bw AS string)) AS eid
FROM metrics m JOIN users u
  ON m.sid = u.sid AND u.ts BETWEEN m.ts - INTERVAL 2 MINUTES AND m.ts + INTERVAL 1 MINUTE
WHERE m.bw > 400
"""


def join_py(metrics, users):
    hot = metrics.filter(F.col("bw") > 400, name="where_metrics")
    j = hot.join(users, on=["sid"], lower="2 minutes", upper="1 minute", ts_out="ts")
    return j.select("sid", "ts", "bw", "user",
                    F.concat_ws(":", F.col("sid"), F.col("user"), F.col("bw").cast("string")).alias("eid"),
                    name="select")


FILTER_SQL = """
SELECT sid, ts, bw * 8 AS bits, concat_ws('@', sid, cast(ts AS string)) AS eid
FROM metrics WHERE bw > 400 AND sid <> 'b'
"""


def filter_py(metrics):
    hot = metrics.filter((F.col("bw") > 400) & (F.col("sid") != "b"), name="where_metrics")
    return hot.select("sid", "ts", (F.col("bw") * 8).alias("bits"),
                      F.concat_ws("@", F.col("sid"), F.col("ts").cast("string")).alias("eid"), name="select")


CASES = {"window": (WINDOW_SQL, window_py), "sliding": (SLIDING_SQL, sliding_py), "join": (JOIN_SQL, join_py),
         "filter": (FILTER_SQL, filter_py)}

minute = st.integers(0, 14)
metric_rows = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([50.0, 150.0, 450.0, 600.0, 900.0]),
                                 minute), min_size=1, max_size=14)
user_rows = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["ann", "bob"]), minute), max_size=6)


def _tag(df, label: str, cols: list[str], prov: bool):
    prov_col = F.col(PROV) if prov else F.lit(None).cast("array<struct<id:bigint,ts:timestamp>>")
    ids = F.array_sort(F.array_distinct(F.transform(prov_col, lambda p: p["id"])))
    return df.select(F.lit(label).alias("_side"), *[F.col(c).cast("string").alias(c) for c in cols],
                     ids.alias("_ids"))


@pytest.fixture(scope="module")
def small_jobs(spark):
    """Tiny frames: one shuffle partition and no adaptive re-planning (each example is a
    few dozen rows; Spark's per-stage overheads are what costs)."""
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")
    saved = {k: spark.conf.get(k) for k in keys}
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    yield spark
    for k, v in saved.items():
        spark.conf.set(k, v)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(sorted(CASES)), metrics=metric_rows, users=user_rows)
def test_sql_and_python_give_the_same_alerts_and_provenance(small_jobs, case, metrics, users):
    spark = small_jobs
    sql, py = CASES[case]
    m = spark.createDataFrame([(s, bw, T0 + timedelta(minutes=t)) for s, bw, t in metrics], METRICS)
    u = spark.createDataFrame([(s, n, T0 + timedelta(minutes=t, seconds=30)) for s, n, t in users], USERS)
    frames = {"metrics": m, "users": u}
    compiled = compile_sql(sql, {k: v.columns for k, v in frames.items()}, {"metrics": "ts", "users": "ts"})
    inputs = [frames[n] for n in compiled.inputs]

    q_sql, q_py = ProvQuery(), ProvQuery()
    out_sql = compiled.fn(*[q_sql.source(f, n, "ts") for f, n in zip(inputs, compiled.inputs, strict=True)])
    out_py = py(*[q_py.source(f, n, "ts") for f, n in zip(inputs, compiled.inputs, strict=True)])
    sink_sql, sink_py = out_sql.sink("alerts"), out_py.sink("alerts")
    assert out_sql.columns == out_py.columns == list(compiled.output)
    cols = list(compiled.output)
    # the same operator graph: kinds, lags, and so U (A 4)
    shape = lambda g: ([n["kind"] for n in g["nodes"]], [e["lag_s"] for e in g["edges"]], g["U_s"])  # noqa: E731
    assert shape(q_sql.graph_dict()) == shape(q_py.graph_dict())

    for view, f in frames.items():
        f.createOrReplaceTempView(view)
    plain = spark.sql(compiled.spark_sql)
    rows = (_tag(sink_sql.df, "sql", cols, True).unionByName(_tag(sink_py.df, "py", cols, True))
            .unionByName(_tag(plain, "plain", cols, False)).collect())
    by_side: dict[str, list] = {"sql": [], "py": [], "plain": []}
    for r in rows:
        by_side[r["_side"]].append((tuple(r[c] for c in cols), tuple(r["_ids"] or ())))
    sql_rows, py_rows = sorted(by_side["sql"]), sorted(by_side["py"])
    assert sql_rows == py_rows  # the same alerts, each with the same source tuples
    assert sorted(a for a, _ in sql_rows) == sorted(a for a, _ in by_side["plain"])  # the SQL's own meaning
    assert all(ids for _, ids in sql_rows)  # every alert names its source tuples


@pytest.mark.parametrize("sql, construct", [
    ("SELECT sid, ts, 'x' AS eid FROM metrics ORDER BY ts", "ORDER BY"),
    ("SELECT sid, ts, 'x' AS eid FROM metrics LIMIT 3", "LIMIT"),
    ("SELECT DISTINCT sid, ts, 'x' AS eid FROM metrics", "DISTINCT"),
    ("SELECT sid, ts, 'x' AS eid FROM (SELECT * FROM metrics)", "subquer"),
    ("SELECT sid, max(bw) AS m, 'x' AS eid FROM metrics GROUP BY sid", "event-time window"),
    ("SELECT m.sid, m.ts, 'x' AS eid FROM metrics m LEFT JOIN users u ON m.sid = u.sid", "inner"),
    ("SELECT m.sid, greatest(m.ts, u.ts) AS ts, 'x' AS eid FROM metrics m JOIN users u ON m.sid = u.sid",
     "time bounds"),
    ("SELECT sid, ts, sum(bw) OVER (PARTITION BY sid) AS s, 'x' AS eid FROM metrics", "OVER"),
])
def test_unsupported_sql_is_refused_naming_the_construct(sql, construct):
    from moirae.monitors import UnsupportedSql

    with pytest.raises(UnsupportedSql) as err:
        compile_sql(sql, {"metrics": ["sid", "bw", "ts"], "users": ["sid", "user", "ts"]},
                    {"metrics": "ts", "users": "ts"})
    assert construct.lower() in str(err.value).lower()


def test_cluster_monitor_file_gives_the_scenarios_alerts(small_jobs):
    """config/monitors/cluster/overload.yaml, whose event-query is SQL, detects exactly
    the overloads (and with the same provenance) of the scenario's Python event-query
    (moirae/scenarios/queries.py:overload_query), on an hour of the scenario's metrics
    around its first planted incidents."""
    from pathlib import Path

    from moirae.monitors import load
    from moirae.scenarios.queries import overload_query
    from moirae.sources.cluster import ClusterScenario
    from moirae.sources.cluster_config import load_cluster_config

    root = Path(__file__).resolve().parents[2]
    (spec,) = load(root / "config" / "monitors" / "cluster")
    cfg = load_cluster_config(root / "config" / "scenarios" / "cluster.yaml")
    scenario = ClusterScenario(cfg)
    first = min((i for b in range(4) for i in scenario.block_incidents(b)), key=lambda i: i.onset_ns)
    frame = scenario.frames(first.onset_ns - 15 * 60 * 10**9, first.onset_ns + 45 * 60 * 10**9, ("metrics",))["metrics"]
    metrics = small_jobs.createDataFrame(frame.drop(columns=[c for c in frame.columns if c == "ingest_ts"]))
    compiled = compile_sql(spec.event_query.sql, {"metrics": metrics.columns}, {"metrics": "ts"})
    q_sql, q_py = ProvQuery(), ProvQuery()
    out_sql = compiled.fn(q_sql.source(metrics, "metrics", "ts")).sink("overload")
    out_py = overload_query(cfg.metrics.bw_threshold_mbps)(q_py.source(metrics, "metrics", "ts")).sink("overload")
    assert out_sql.df.drop(PROV).schema == out_py.df.drop(PROV).schema  # the same events stream (ev_overload)
    assert q_sql.U == q_py.U
    cols = [c for c in out_py.df.columns if c != PROV]
    rows = _tag(out_sql.df, "sql", cols, True).unionByName(_tag(out_py.df, "py", cols, True)).collect()
    sql_rows = sorted((tuple(r[c] for c in cols), tuple(r["_ids"])) for r in rows if r["_side"] == "sql")
    py_rows = sorted((tuple(r[c] for c in cols), tuple(r["_ids"])) for r in rows if r["_side"] == "py")
    assert sql_rows and sql_rows == py_rows
