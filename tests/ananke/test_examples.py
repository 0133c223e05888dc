"""The paper's example queries (Linear Road, Smart Grid) through the provenance wrappers.

Run on static DataFrames (the wrappers build the same plan; windows, joins and the
provenance column behave as in streaming, minus the watermark), and checked against a
brute-force recomputation from the generated rows: the alerts and, for each, exactly the
source tuples that contributed to it. The graph ANK-1 makes from them is then complete.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest

from ananke.ank1 import Ank1
from ananke.ankn import ankn_items, rows_to_items
from ananke.examples import linear_road as lr
from ananke.examples import smart_grid as sg
from ananke.ids import PROV, from_micros, source_id_col
from ananke.items import ListSink, graph_key
from ananke.query import ProvQuery
from ananke.spark_adapter import collect_sink_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _frame(spark, rows, schema):
    cols = [c.split()[0] for c in schema.split(",")]
    return spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], schema), cols


def _ids(df, stream, cols):
    key = [c for c in cols if c != "ts"]
    got = df.select(*cols, source_id_col(stream, "ts", key).alias("_id")).collect()
    return {tuple(r[c] for c in key) + (r["ts"].replace(tzinfo=None),): r["_id"] for r in got}


def _alerts(sink, keys):
    from pyspark.sql import functions as F

    sel = [F.unix_micros(k).alias(k) if k == sink.ts else F.col(k) for k in keys]
    rows = sink.df.select(*sel, F.col(PROV)).collect()
    return {tuple(from_micros(r[k]) if k == sink.ts else r[k] for k in keys): frozenset(p["id"] for p in r[PROV])
            for r in rows}


def test_linear_road_stopped_vehicles_and_accidents(spark):
    rows = lr.generate(vehicles=30, minutes=12, breakdowns=3, accidents=1, seed=3)
    df, cols = _frame(spark, rows, lr.SCHEMA)
    q = ProvQuery()
    sinks = lr.build(q, df)
    assert q.u_k("stopped") == timedelta(seconds=120) and q.u_k("accident") == timedelta(seconds=150)
    ids = _ids(df, "lr_reports", cols)

    def rid(r):
        return ids[tuple(r[c] for c in cols if c != "ts") + (r["ts"].replace(tzinfo=None),)]

    # brute force: 120 s windows sliding by 30 s, per (vid, xway, dir, pos), >= 4 zero-speed reports
    win = defaultdict(set)
    for r in rows:
        if r["speed"] == 0:
            t = int(r["ts"].timestamp())
            for start in range(t - t % 30, t - 120, -30):
                win[(r["vid"], r["xway"], r["dir"], r["pos"], start)].add(rid(r))
    expected = {(vid, pos, start + 120): frozenset(p) for (vid, _, _, pos, start), p in win.items() if len(p) >= 4}
    got = {(vid, pos, int(ts.timestamp()) + 1): p for (vid, pos, ts), p in
           _alerts(sinks["stopped"], ["vid", "pos", "ts"]).items()}
    assert got == expected and len(expected) >= 3
    # accidents: stopped tuples of >= 2 vehicles at one position in a 30 s window
    acc = defaultdict(lambda: (set(), set()))
    for (vid, pos, end), p in expected.items():
        start = (end - 1) - (end - 1) % 30
        acc[(pos, start)][0].add(vid)
        acc[(pos, start)][1].update(p)
    exp_acc = {pos: frozenset(p) for (pos, _), (vids, p) in acc.items() if len(vids) >= 2}
    got_acc = {pos: p for (pos,), p in _alerts(sinks["accident"], ["pos"]).items()}
    assert got_acc == exp_acc and exp_acc

    # the two sinks share source tuples (every accident's): ANK-N over both sinks emits each
    # shared source vertex once, and delivers the same graph as ANK-1 (as sets)
    items_n = rows_to_items(ankn_items(list(sinks.values())).collect())
    keys_n = [graph_key(i) for i in items_n]
    assert len(keys_n) == len(set(keys_n))
    out = ListSink()
    ank = Ank1.from_query(q).build(out)
    for name, sink in sinks.items():
        for st, prov in collect_sink_rows(sink, sink.df):
            ank.on_tuple(name, st, prov)
    for name in sinks:
        ank.on_watermark(name, lr.START + timedelta(hours=1))
    assert set(keys_n) == {graph_key(i) for i in out.items}
    assert {i.id for i in items_n if i.kind == "source"} == set().union(*expected.values())


def test_smart_grid_blackout_and_anomaly_and_ank1_graph(spark):
    rows = sg.generate(meters=12, days=3, blackouts=2, anomalies=3, seed=5)
    df, cols = _frame(spark, rows, sg.SCHEMA)
    q = ProvQuery()
    sinks = sg.build(q, df, min_meters=0, limit=200.0)
    assert q.u_k("blackout") == timedelta(hours=48) and q.u_k("anomaly") == timedelta(hours=25)
    ids = _ids(df, "sg_readings", cols)

    def rid(r):
        return ids[(r["meter"], r["value"], r["ts"].replace(tzinfo=None))]

    day_sum, day_prov, midnight = defaultdict(float), defaultdict(set), {}
    for r in rows:
        day = (r["ts"] - sg.START).days
        if r["ts"].hour == 0:
            midnight[(r["meter"], day)] = (r["value"], rid(r))
        else:
            day_sum[(r["meter"], day)] += r["value"]
            day_prov[(r["meter"], day)].add(rid(r))
    exp_anom = {}
    for (m, d), s in day_sum.items():
        if s > 200 and (m, d + 1) in midnight and abs(s - midnight[(m, d + 1)][0]) > 200:
            exp_anom[(m, d)] = frozenset(day_prov[(m, d)] | {midnight[(m, d + 1)][1]})
    # an anomaly's time is its midnight reading's (the later side of the join): day d + 1
    got_anom = {(m, (ts - sg.START).days - 1): p for (m, ts), p in _alerts(sinks["anomaly"], ["meter", "ts"]).items()}
    assert got_anom == exp_anom and exp_anom
    zero_days = defaultdict(set)
    for (m, d), s in day_sum.items():
        if s == 0:
            zero_days[d] |= day_prov[(m, d)]
    got_black = {p for p in _alerts(sinks["blackout"], ["meters"]).values()}
    assert got_black == {frozenset(p) for p in zero_days.values()} and zero_days

    # ANK-1 over these sinks: every contributing reading appears once, all end expired
    out = ListSink()
    ank = Ank1.from_query(q).build(out)
    for name, sink in sinks.items():
        for st, prov in collect_sink_rows(sink, sink.df):
            ank.on_tuple(name, st, prov)
    for name in sinks:
        ank.on_watermark(name, sg.START + timedelta(days=30))
    sources = [i.id for i in out.items if i.kind == "source"]
    assert len(sources) == len(set(sources))
    assert set(sources) == set().union(*exp_anom.values(), *zero_days.values())
    assert ank.state_size() == 0 and sum(i.kind == "label" for i in out.items) == len(sources) + ank.stats.sink_tuples


def test_a_source_tuple_named_twice_gives_one_edge_in_ank1_and_ankn(spark):
    """Two identical source rows share one id, and the window's provenance (a plain
    collect_list, not de-duplicated in Spark) names it twice; the graph holds the source
    vertex, and its edge to the sink tuple, once."""
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    t = datetime(2024, 1, 1, 8, 0, 1, tzinfo=UTC)
    df = spark.createDataFrame([(t, 1, 5.0), (t, 1, 5.0), (t + timedelta(seconds=1), 1, 7.0)],
                               "ts timestamp, k long, v double")
    q = ProvQuery()
    sink = (q.source(df, "s", "ts").window("10 seconds", keys=["k"], aggs=[F.count("v").alias("n")])
            .sink("out"))
    (row,) = sink.df.select("n", PROV).collect()
    ids = [p["id"] for p in row[PROV]]
    assert row["n"] == 3 and len(ids) == 3 and len(set(ids)) == 2  # Spark names the twin twice
    out = ListSink()
    ank = Ank1.from_query(q).build(out)
    for st, prov in collect_sink_rows(sink, sink.df):
        ank.on_tuple("out", st, prov)
    ank.on_watermark("out", t + timedelta(hours=1))
    for items in (out.items, rows_to_items(ankn_items(sink).collect())):
        edges = [(i.source_id, i.sink_id) for i in items if i.kind == "edge"]
        sources = [i.id for i in items if i.kind == "source"]
        assert len(edges) == len(set(edges)) == 2 and sorted(sources) == sorted(set(ids))
