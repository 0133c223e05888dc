"""Merging partial aggregates chunk by chunk equals the aggregate over all rows, for any
chunking and any chunk order (M 4.3); post-operators after each merge."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recall.aggregate import GroupedMerge, Moments, RowMerge, group_key
from recall.split import split_template
from tests.recall.operator.recall_op_helpers import close, pandas_partials, rows_close, truth_agg

ALL_AGGS = ("SELECT h.sid, count(*) AS n, count(h.x) AS nx, sum(h.k) AS sk, avg(h.x) AS ax, min(h.x) AS mn, "
            "max(h.k) AS mk, variance(h.x) AS v, var_pop(h.x) AS vp, stddev(h.x) AS sd, "
            "stddev_pop(h.x) AS sdp, count(DISTINCT h.k) AS dk, sum(DISTINCT h.k) AS sdk FROM m h GROUP BY h.sid")
TRUTH_COLS = {"n": ("count", None, False), "nx": ("count", "x", False), "sk": ("sum", "k", False),
              "ax": ("avg", "x", False), "mn": ("min", "x", False), "mk": ("max", "k", False),
              "v": ("var_samp", "x", False), "vp": ("var_pop", "x", False), "sd": ("stddev_samp", "x", False),
              "sdp": ("stddev_pop", "x", False), "dk": ("count", "k", True), "sdk": ("sum", "k", True)}

row = st.tuples(st.sampled_from(["a", "b", "c"]),
                st.one_of(st.none(), st.floats(-1e3, 1e3, allow_nan=False)),
                st.one_of(st.none(), st.integers(-5, 5)),
                st.integers(0, 5))
frames = st.lists(row, min_size=0, max_size=40).map(
    lambda rs: pd.DataFrame(rs, columns=["sid", "x", "k", "chunk"]).astype({"x": "float64", "k": "float64"}))


def feed(merge, spec, df: pd.DataFrame, order: list[int]) -> None:
    for c in order:
        part = df[df["chunk"] == c]
        if spec.group_sql and part.empty:
            continue  # a grouped query over an empty chunk returns no row
        merge.add(pandas_partials(spec, part))


def truth_groups(df: pd.DataFrame) -> dict[str, dict]:
    out = {}
    for sid, g in df.groupby("sid"):
        out[group_key([sid])] = {"sid": sid, **{
            name: (len(g) if col is None else truth_agg(func, g[col], distinct))
            for name, (func, col, distinct) in TRUTH_COLS.items()}}
    return out


@settings(max_examples=30, deadline=None)
@given(df=frames, perm=st.permutations(range(6)))
def test_merged_partials_equal_one_shot_aggregate(df, perm):
    spec = split_template(ALL_AGGS)
    merge = GroupedMerge(spec)
    feed(merge, spec, df, list(perm))
    got = dict(merge.result())
    want = truth_groups(df)
    assert got.keys() == want.keys()
    for key in want:
        assert rows_close(got[key], want[key]), (key, got[key], want[key])


@settings(max_examples=25, deadline=None)
@given(df=frames, perm=st.permutations(range(6)))
def test_ungrouped_aggregate_over_chunks(df, perm):
    spec = split_template("SELECT count(*) AS n, sum(h.x) AS s, avg(h.k) AS a, stddev_pop(h.x) AS sd FROM m h")
    merge = GroupedMerge(spec)
    feed(merge, spec, df, list(perm))
    [(key, got)] = merge.result()
    assert key == "[]"
    assert got["n"] == len(df)
    assert close(got["s"], truth_agg("sum", df["x"]))
    assert close(got["a"], truth_agg("avg", df["k"]))
    assert close(got["sd"], truth_agg("stddev_pop", df["x"]))


@settings(max_examples=25, deadline=None)
@given(df=frames, perm=st.permutations(range(6)))
def test_having_order_limit_after_merge(df, perm):
    spec = split_template("SELECT h.sid, sum(h.k) AS s, count(*) AS n FROM m h GROUP BY h.sid "
                          "HAVING count(*) > 2 ORDER BY s DESC NULLS LAST, h.sid LIMIT 2")
    merge = GroupedMerge(spec)
    feed(merge, spec, df, list(perm))
    got = [r for _, r in merge.result()]
    want = []
    for sid, g in df.groupby("sid"):
        if len(g) > 2:
            want.append({"sid": sid, "s": truth_agg("sum", g["k"]), "n": len(g)})
    want.sort(key=lambda r: (r["s"] is None, -(r["s"] or 0), r["sid"]))
    assert len(got) == len(want[:2])
    for a, b in zip(got, want[:2], strict=True):
        assert rows_close(a, b)


def test_moments_merge_resists_cancellation():
    base = 1e9
    chunks = [[base + 1, base + 2, base + 3], [base + 4], [base + 5, base + 6]]
    m = Moments()
    for c in chunks:
        mean = sum(c) / len(c)
        m = m.merge(Moments.of(len(c), mean, sum((v - mean) ** 2 for v in c)))
    assert m.value("var_samp") == pytest.approx(3.5, rel=1e-9)
    assert m.value("stddev_pop") == pytest.approx(math.sqrt(35 / 12), rel=1e-9)
    assert Moments.of(1, 5.0, 0.0).value("var_samp") is None and Moments().value("var_pop") is None


def test_expressions_over_aggregates_and_group_keys():
    spec = split_template("SELECT h.sid, sum(h.x) / count(h.x) AS ratio, max(h.x) - min(h.x) AS spread "
                          "FROM m h GROUP BY h.sid HAVING avg(h.x) BETWEEN 1 AND 10 OR h.sid IN ('z')")
    merge = GroupedMerge(spec)
    df = pd.DataFrame({"sid": ["a", "a", "b", "z"], "x": [2.0, 4.0, 50.0, 99.0]})
    merge.add(pandas_partials(spec, df))
    got = dict(merge.result())
    assert got == {'["a"]': {"sid": "a", "ratio": 3.0, "spread": 2.0},
                   '["z"]': {"sid": "z", "ratio": 99.0, "spread": 0.0}}


def test_integer_division_truncates_like_postgres():
    spec = split_template("SELECT count(*) / 2 AS half, -count(*) / 2 AS neg FROM m h")
    merge = GroupedMerge(spec)
    merge.add(pd.DataFrame({"a0_n": [5]}))
    assert merge.result()[0][1] == {"half": 2, "neg": -2}


def test_row_merge_keeps_global_top_k():
    spec = split_template("SELECT h.ts, h.x FROM m h ORDER BY h.x DESC LIMIT 3")
    merge = RowMerge(spec)
    merge.add(pd.DataFrame({"ts": [1, 2, 3], "x": [5.0, 1.0, 7.0]}))
    merge.add(pd.DataFrame({"ts": [4, 5], "x": [6.0, 9.0]}))
    assert [r["x"] for _, r in merge.result()] == [9.0, 7.0, 6.0]
    assert len(merge.rows) == 3  # only the current top rows are kept


def test_row_merge_append_only_hands_rows_out_once_and_keeps_none():
    plain = RowMerge(split_template("SELECT h.sid FROM m h"))
    assert plain.append_only
    plain.add(pd.DataFrame({"sid": ["a", "a"]}))
    first = plain.take_fresh()
    plain.add(pd.DataFrame({"sid": ["a"]}))
    keys = [k for k, _ in first + plain.take_fresh()]
    assert len(set(keys)) == 3 and all(k.startswith('["a"]#') for k in keys)
    assert plain.rows == [] and plain.take_fresh() == []
    distinct = RowMerge(split_template("SELECT DISTINCT h.sid FROM m h"))
    distinct.add(pd.DataFrame({"sid": ["a", "b"]}))
    distinct.add(pd.DataFrame({"sid": ["a", "c"]}))
    assert [r for _, r in distinct.take_fresh()] == [{"sid": "a"}, {"sid": "b"}, {"sid": "c"}]


def test_row_merge_limit_without_order_keeps_the_first_rows():
    merge = RowMerge(split_template("SELECT h.x FROM m h LIMIT 2"))
    merge.add(pd.DataFrame({"x": [3, 1, 2]}))
    merge.add(pd.DataFrame({"x": [9]}))
    assert [r["x"] for _, r in merge.result()] == [3, 1] and len(merge.rows) == 2
