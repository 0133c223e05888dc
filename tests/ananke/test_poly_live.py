"""How-provenance polynomials from Spark (H 4): the window wrapper collects each tuple's
values beside its id and the sink turns a batch into one polynomial per sink tuple
(static batch, list mode); a live event-query whose window keeps a digest stores one
polynomial per alert in ``ank_poly`` with values read from the archive, and evaluating
them under removals gives what recomputing the window on the remaining rows gives."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

import tests.moirae.scenario_small as sc
from ananke.poly_eval import evaluate
from ananke.poly_spark import sink_polys
from ananke.query import ProvQuery
from ananke.spark_adapter import _collect, sink_rows
from archive import Database
from tests.engine_factory import make_engine


def test_a_static_batch_gives_polynomials_that_evaluate_like_a_rerun(spark):
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [(t0 + timedelta(seconds=7 * i), f"s{i % 2}", None if i % 5 == 3 else float(100 * i)) for i in range(24)]
    df = spark.createDataFrame(rows, "ts timestamp, sid string, bw double")
    q = ProvQuery(polynomials=True)
    m = q.source(df, "m", "ts")
    sink = (m.window("1 minute", keys=["sid"], aggs=[F.avg("bw").alias("a"), F.count(F.lit(1)).alias("n"),
                                                     F.sum(F.col("bw") * 2).alias("s2")], ts_out="ts")
            .filter(F.col("a") > 500).sink("w"))
    plan = sink.poly
    assert (plan.kind, plan.value_columns, plan.conditions) == ("window", ("bw", "(bw * CAST(2 AS DOUBLE))"),
                                                                ("(a > CAST(500 AS DOUBLE))",))
    _, table = _collect(sink, sink.with_ids())
    got = sink_rows(sink, table)
    polys = sink_polys(plan, table, got)
    assert len(polys) == len(got) > 0
    pdf = pd.DataFrame(rows, columns=["ts", "sid", "bw"])
    pdf["ts"] = pd.to_datetime(pdf["ts"], utc=True)
    rng = np.random.default_rng(3)
    for (st, prov), (sid, _, poly) in zip(got, polys, strict=True):
        assert sid == st.id and sorted(poly.ids.tolist()) == sorted(i for i, _ in prov)
        same = evaluate(plan, poly, st.payload)
        assert same.holds and not same.changed, same
        drop = set(rng.choice(poly.ids, size=len(poly.ids) // 2, replace=False).tolist())
        out = evaluate(plan, poly, st.payload, removed=drop)
        lo = st.ts + timedelta(microseconds=1) - timedelta(minutes=1)
        times = {i: t for i, t in prov}
        keep = pdf[(pdf["sid"] == st.payload["sid"]) & (pdf["ts"] >= lo) & (pdf["ts"] <= st.ts)
                   & ~pdf["ts"].isin([times[i] for i in drop])]
        assert out.support == len(keep) and out.values["n"] == len(keep)
        mean = keep["bw"].mean()
        assert (out.values["a"] is None and np.isnan(mean)) or out.values["a"] == pytest.approx(mean)
        assert out.values["s2"] == (pytest.approx(2 * keep["bw"].sum()) if keep["bw"].notna().any() else None)
        assert out.holds == bool(len(keep) and mean > 500)
    # a join of two sources: one monomial of degree 2 per joined tuple
    j = m.join(q.source(df, "m2", "ts"), on=["sid"], lower="0 seconds", upper="10 seconds").sink("j")
    _, jt = _collect(j, j.with_ids())
    jp = sink_polys(j.poly, jt, sink_rows(j, jt))
    assert j.poly.degree == 2 and jp and all(p.terms == 1 and p.degree == 2 for _, _, p in jp)


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # PolyStore is tested on both in test_poly_store
def test_live_event_query_stores_polynomials_per_alert(spark, pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    # ananke.polynomials off: the flow keeps none
    other = Database(pg.dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    off = make_engine(other, tmp_path / "off", ananke={"polynomials": False})
    try:
        off.source("metrics", spark.readStream.schema(sc.SCHEMA).csv(str(tmp_path)), ts="ts", lateness="30 seconds")
        off.event_query("overload", sc.overload, inputs=["metrics"])
        assert off.deploy.flows["overload"].polys is None and off.deploy.flows["overload"].sink.poly is None
    finally:
        off.close()
        other.drop_schema()
        other.close()

    folder = tmp_path / "in"
    folder.mkdir()
    engine = make_engine(pg, tmp_path / "data", spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0}, ananke={"polynomials": True})
    parts = sc.live()
    try:
        df = spark.readStream.schema(sc.SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder))
        engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        flow = engine.deploy.flows["overload"]
        assert flow.sink.digest is not None and flow.polys is not None  # values come from the archive
        engine.start()
        for i, part in enumerate(parts):
            part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / f"p{i}.csv", index=False,
                                                                                   header=False)
        want = sc.expected_events(pd.concat(parts))
        store, g = flow.polys, flow.graph

        def alerts():
            with pg.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT id, tuple_ts, payload FROM {g.v} WHERE kind = 'sink'")
                return {r[2]["eid"]: (r[0], r[1], r[2]) for r in cur.fetchall()}

        sc.wait(lambda: set(alerts()) >= want and store.count("overload") >= len(want), what="every alert's polynomial")
        plan = store.plans()["overload"]
        assert plan.kind == "window" and plan.conditions
        live = pd.concat(parts)
        for eid, (sid, ts, payload) in alerts().items():
            poly = store.get("overload", [sid])[sid]
            same = evaluate(plan, poly, payload)
            assert same.holds and not same.changed, (eid, same)
            hot = set(poly.ids[~np.isnan(poly.values[:, 0]) & (poly.values[:, 0] > 90)].tolist())
            assert hot and ("overload", sid, ts) in store.affected(sorted(hot))
            out = evaluate(plan, poly, payload, removed=hot)
            win = live[(live["sid"] == payload["sid"]) & (live["ts"] > ts - pd.Timedelta(minutes=5))
                       & (live["ts"] <= ts) & (live["bw"] <= 90)]
            assert out.support == len(win)
            assert out.holds == bool(len(win) and win["bw"].mean() > sc.THRESHOLD)
        ratio = store.nbytes() / max(1, _archived_bytes(pg))
        assert ratio < 1.0, ratio  # a few alerts' polynomials beside the whole stream
    finally:
        engine.close()


def _archived_bytes(db: Database) -> int:
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                    "AND c.relkind = 'r' AND (c.relname = 'metrics' OR c.relname LIKE 'metrics\\_%')")
        return int(cur.fetchone()[0])
