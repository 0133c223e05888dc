"""Splitting history-query templates into per-chunk partial queries and post-operators
(M 4.3), and rejecting what cannot be split."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from recall.split import (
    BadTemplate,
    RecallError,
    UnknownEventAttribute,
    UnsupportedAggregate,
    render,
    split_template,
)


def _select_aliases(sql: str) -> list[str]:
    tree = sqlglot.parse_one(sql, dialect="postgres")
    return [e.alias_or_name for e in tree.expressions]


def test_paper_template_binds_event_attribute_and_pushes_having_into_where():
    q = split_template("SELECT h.sid, avg(h.bw), stddev(h.bw) FROM History h GROUP BY h.sid HAVING h.sid = e.sid")
    assert q.params == ("sid",)
    assert q.streams == ("history",)  # unquoted names fold to lower case, as in PostgreSQL
    assert q.aggregated and q.group_sql == ("h.sid",)
    assert [a.func for a in q.aggregates] == ["avg", "stddev_samp"]
    assert _select_aliases(q.chunk_sql) == ["g0", "a0_sum", "a0_n", "a1_n", "a1_mean", "a1_m2"]
    tree = sqlglot.parse_one(q.chunk_sql, dialect="postgres")
    assert render(tree.args["where"].this) == "h.sid = :sid"
    assert tree.args.get("having") is None and q.having is None
    assert q.columns == ("sid", "avg", "stddev")


@pytest.mark.parametrize("func, parts", [
    ("count(*)", ["a0_n"]), ("count(h.x)", ["a0_n"]), ("sum(h.x)", ["a0_sum", "a0_n"]),
    ("avg(h.x)", ["a0_sum", "a0_n"]), ("min(h.x)", ["a0_min"]), ("max(h.x)", ["a0_max"]),
    ("variance(h.x)", ["a0_n", "a0_mean", "a0_m2"]), ("var_samp(h.x)", ["a0_n", "a0_mean", "a0_m2"]),
    ("var_pop(h.x)", ["a0_n", "a0_mean", "a0_m2"]), ("stddev(h.x)", ["a0_n", "a0_mean", "a0_m2"]),
    ("stddev_pop(h.x)", ["a0_n", "a0_mean", "a0_m2"]), ("stddev_samp(h.x)", ["a0_n", "a0_mean", "a0_m2"]),
    ("count(DISTINCT h.x)", ["a0_set"]), ("sum(DISTINCT h.x)", ["a0_set"]),
])
def test_each_aggregate_has_its_partial_columns(func, parts):
    q = split_template(f"SELECT {func} FROM m h WHERE h.k = :k")
    assert list(q.aggregates[0].columns) == parts
    assert _select_aliases(q.chunk_sql) == parts
    assert "GROUP BY" not in q.chunk_sql  # one partial row per chunk


def test_variance_is_pushed_as_count_mean_m2_not_sums_of_squares():
    q = split_template("SELECT stddev(h.x) FROM m h")
    assert "VAR_POP(h.x) * COUNT(h.x)" in q.chunk_sql and "AVG(h.x)" in q.chunk_sql


def test_count_distinct_pushes_the_distinct_values():
    q = split_template("SELECT h.sid, count(DISTINCT h.port) FROM m h GROUP BY h.sid")
    assert "ARRAY_AGG(DISTINCT h.port)" in q.chunk_sql and q.aggregates[0].distinct


def test_having_order_limit_stay_post_operators():
    q = split_template("SELECT h.sid, count(*) AS n FROM m h WHERE h.x > :lo GROUP BY h.sid "
                       "HAVING count(*) >= 3 AND h.sid <> 'z' ORDER BY n DESC, h.sid LIMIT 2 OFFSET 1")
    tree = sqlglot.parse_one(q.chunk_sql, dialect="postgres")
    assert tree.args.get("order") is None and tree.args.get("limit") is None
    assert render(tree.args["where"].this) == "h.x > :lo AND h.sid <> 'z'"
    assert render(q.having) == "COUNT(*) >= 3"
    assert [(render(k.expr), k.desc) for k in q.order] == [("COUNT(*)", True), ("h.sid", False)]
    assert (q.limit, q.offset) == (2, 1)


def test_aggregates_only_in_having_or_order_are_pushed_too():
    q = split_template("SELECT h.sid FROM m h GROUP BY h.sid HAVING max(h.x) > 5 ORDER BY min(h.x)")
    assert [a.func for a in q.aggregates] == ["max", "min"]


def test_group_by_position_and_alias():
    q = split_template("SELECT h.node AS n, h.pid, avg(h.cpu) FROM procs h GROUP BY 1, pid")
    assert q.group_sql == ("h.node", "h.pid")


def test_filter_clause_travels_with_each_partial():
    q = split_template("SELECT avg(h.x) FILTER (WHERE h.k > 2) FROM m h")
    assert q.chunk_sql.count("FILTER(WHERE h.k > 2)") == 2


def test_plain_top_k_is_pushed_down_per_chunk():
    q = split_template("SELECT h.ts, h.x FROM m h WHERE h.sid = :sid ORDER BY h.x DESC LIMIT 5 OFFSET 2")
    assert not q.aggregated
    tree = sqlglot.parse_one(q.chunk_sql, dialect="postgres")
    assert render(tree.args["limit"].expression) == "7"
    assert tree.args["order"] is not None


def test_order_by_a_column_not_selected_becomes_hidden():
    q = split_template("SELECT h.x FROM m h ORDER BY h.ts LIMIT 3")
    assert q.hidden == ("moirae_o0",) and "h.ts AS moirae_o0" in q.chunk_sql


def test_placeholders_are_rendered_for_the_archiver_never_inlined():
    q = split_template("SELECT count(*) FROM m h WHERE h.sid = :sid AND h.x > e.lo")
    assert q.params == ("sid", "lo")
    assert ":sid" in q.chunk_sql and ":lo" in q.chunk_sql
    assert isinstance(sqlglot.parse_one(q.chunk_sql, dialect="postgres").find(exp.Placeholder), exp.Placeholder)


def test_e_is_a_table_alias_then_not_rewritten():
    q = split_template("SELECT count(*) FROM m e WHERE e.sid = 'a'")
    assert q.params == ()


@pytest.mark.parametrize("sql, err, words", [
    ("DELETE FROM m", BadTemplate, "single SELECT"),
    ("UPDATE m SET x = 1", BadTemplate, "single SELECT"),
    ("SELECT x FROM m UNION SELECT y FROM n", BadTemplate, "single SELECT"),
    ("SELECT 1 FROM m; SELECT 2 FROM m", BadTemplate, "single statement"),
    ("SELEC x FRM m", BadTemplate, "template"),
    ("", BadTemplate, "non-empty"),
    ("SELECT 1", BadTemplate, "FROM"),
    ("SELECT median(h.x) FROM m h", UnsupportedAggregate, "median"),
    ("SELECT h.sid, percentile_cont(0.5) WITHIN GROUP (ORDER BY h.x) FROM m h GROUP BY h.sid",
     UnsupportedAggregate, "percentile"),
    ("SELECT bool_and(h.b) FROM m h", UnsupportedAggregate, "supported"),
    ("SELECT my_udf(h.x) FROM m h GROUP BY h.sid", UnsupportedAggregate, "my_udf"),
    ("SELECT h.sid, count(*) FROM m h", BadTemplate, "h.sid must appear in GROUP BY"),
    ("SELECT sum(h.x) OVER () FROM m h", BadTemplate, "window"),
    ("SELECT min(DISTINCT h.x) FROM m h", UnsupportedAggregate, "DISTINCT"),
    ("SELECT h.x FROM m h LIMIT :n", BadTemplate, "LIMIT"),
    ("SELECT count(*) FROM (SELECT * FROM m) h", BadTemplate, "subqueries"),
    ("SELECT (SELECT max(x) FROM m) FROM m h", BadTemplate, "subqueries"),
])
def test_rejections_name_the_problem(sql, err, words):
    with pytest.raises(err) as info:
        split_template(sql)
    assert words.lower() in str(info.value).lower()
    assert isinstance(info.value, RecallError) and isinstance(info.value, ValueError)


def test_unknown_event_attribute():
    with pytest.raises(UnknownEventAttribute) as info:
        split_template("SELECT count(*) FROM m h WHERE h.sid = e.host", event_attrs=("sid", "eid", "ts"))
    assert ":host" in str(info.value) and "sid" in str(info.value)
    assert isinstance(info.value, KeyError)


def test_subquery_in_where_runs_within_each_chunk():
    q = split_template("SELECT count(*) FROM m h WHERE h.sid IN (SELECT s.sid FROM hosts s WHERE s.rack = :rack)")
    assert q.streams == ("m", "hosts") and q.params == ("rack",) and [a.func for a in q.aggregates] == ["count"]
