"""Static U (A 4, Theorem 4.1): hand-computed values for chains, branches and joins."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.graph import GraphError, OperatorGraph, UnknownSink

M = timedelta(minutes=1)
Z = timedelta(0)


def test_chain_sums_window_sizes_stateless_adds_nothing():
    g = OperatorGraph()
    s = g.add("source", "S")
    f = g.add("filter", "F", [(s, Z)])
    a1 = g.add("window", "A1", [(f, 2 * M)])
    m = g.add("map", "M", [(a1, Z)])
    a2 = g.add("window", "A2", [(m, 3 * M)])
    g.add("sink", "K", [(a2, Z)])
    assert g.u_k("K") == 5 * M and g.U == 5 * M


def test_branches_take_the_heaviest_path_and_u_is_max_over_sinks():
    g = OperatorGraph()
    s = g.add("source", "S")
    a = g.add("window", "A", [(s, 10 * M)])
    b = g.add("window", "B", [(s, 4 * M)])
    c = g.add("window", "C", [(b, 4 * M)])
    g.add("sink", "K1", [(a, Z)])
    g.add("sink", "K2", [(c, Z)])
    assert g.u_values() == {"K1": 10 * M, "K2": 8 * M}
    assert g.U == 10 * M


def test_join_adds_each_sides_bound_to_that_side():
    # S1 -> A(5) -> J <- S2 ; left tuples lag at most `upper`, right ones at most `lower`
    g = OperatorGraph()
    s1, s2 = g.add("source", "S1"), g.add("source", "S2")
    a = g.add("window", "A", [(s1, 5 * M)])
    j = g.add("join", "J", [(a, 2 * M), (s2, 30 * M)])
    g.add("sink", "K", [(j, Z)])
    assert g.u_k("K") == 30 * M  # max(5 + 2, 0 + 30)


def test_diamond_through_a_join():
    g = OperatorGraph()
    s = g.add("source", "S")
    a = g.add("window", "A", [(s, 6 * M)])
    b = g.add("filter", "B", [(s, Z)])
    j = g.add("join", "J", [(a, 1 * M), (b, 1 * M)])
    w = g.add("window", "W", [(j, 3 * M)])
    g.add("sink", "K", [(w, Z)])
    assert g.u_k("K") == 10 * M  # 6 + 1 + 3


def test_errors_name_the_culprit():
    g = OperatorGraph()
    with pytest.raises(GraphError, match="'loop'"):
        g.add("loop", "x")
    with pytest.raises(GraphError, match="needs at least one input"):
        g.add("sink", "K")
    with pytest.raises(UnknownSink, match="'nope'"):
        g.u_k("nope")
    s = g.add("source", "S")
    g.add("sink", "K", [(s, Z)])
    with pytest.raises(GraphError, match="already"):
        g.add("sink", "K", [(s, Z)])


@pytest.mark.spark
def test_wrappers_record_the_graph(spark):
    """The Spark wrappers record the same U: the running example and a join."""
    from pyspark.sql import functions as F

    from ananke.examples import running
    from ananke.query import ProvQuery

    df = spark.createDataFrame([], running.SCHEMA)
    q = ProvQuery()
    running.build(q, df)
    assert q.u_k("K1") == q.u_k("K2") == 15 * M
    kinds = [n["kind"] for n in q.graph_dict()["nodes"]]
    assert kinds.count("window") == 2 and kinds.count("sink") == 2 and kinds.count("source") == 1
    q2 = ProvQuery()
    s = q2.source(df, "cars", "ts")
    w = s.window("2 minutes", "30 seconds", keys=["car"], aggs=[F.count(F.lit(1)).alias("n")])
    j = w.join(s, on=["car"], lower="1 minute", upper="10 minutes")
    k = j.sink("K")
    assert q2.u_k("K") == 12 * M  # left: 2 min window + 10 min upper; right: 1 min lower
    assert "_prov" in k.df.columns and k.ts == "ts"
