"""The Recall operator: tasks per event, online aggregation with extrapolation and covered
intervals (M 4.5.1), and revision outputs that reproduce the current result (M 4.6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recall.api import EndReason, Interval, OutputKind
from recall.operator import PERIOD_FROM, PERIOD_TO, Recall
from recall.revision_ops import ResultTable
from recall.split import BadTemplate, UnknownEventAttribute
from tests.recall.operator.recall_op_helpers import pandas_partials, rows_close, truth_agg

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
EVENT = {"eid": "ev1", "ts": T0 + WEEK, "sid": "s1"}


def day(d: int) -> Interval:
    return Interval(T0 + d * DAY, T0 + (d + 1) * DAY)


def test_task_for_binds_attributes_and_bounds():
    op = Recall("norm", "SELECT h.sid, avg(h.bw) FROM history h GROUP BY h.sid HAVING h.sid = e.sid",
                period=WEEK, tickets=7)
    spec = op.task_for(EVENT)
    assert spec.operator == "norm" and spec.eid == "ev1" and spec.event_ts == T0 + WEEK
    assert spec.params == {"sid": "s1"} and spec.bound == T0 and spec.tickets == 7
    assert spec.feedback_period is None  # bounded tasks need no feedback (M 4.4)
    assert spec.query.template == op.split.chunk_sql and spec.query.params == ("sid",)
    assert spec.query.streams == ("history",)


def test_unbounded_task_suspends_for_feedback():
    op = Recall("r", "SELECT count(*) FROM m h WHERE h.sid = :sid", feedback_period=3, feedback_timeout=60.0)
    spec = op.task_for(EVENT)
    assert spec.bound is None and spec.feedback_period == 3 and spec.feedback_timeout == 60.0


def test_time_column_restricts_rows_to_the_period():
    op = Recall("r", "SELECT count(*) FROM m h WHERE h.sid = :sid", period=WEEK, time_column="h.ts")
    assert f"h.ts >= :{PERIOD_FROM}" in op.split.chunk_sql and f"h.ts < :{PERIOD_TO}" in op.split.chunk_sql
    spec = op.task_for(EVENT)
    assert spec.params == {"sid": "s1", PERIOD_FROM: T0, PERIOD_TO: T0 + WEEK}


def test_event_errors_are_clear():
    op = Recall("r", "SELECT count(*) FROM m h WHERE h.host = :host")
    with pytest.raises(UnknownEventAttribute, match=":host"):
        op.task_for(EVENT)
    with pytest.raises(BadTemplate, match="timezone-aware"):
        op.task_for({**EVENT, "host": "x", "ts": datetime(2026, 1, 1)})  # noqa: DTZ001 - the point
    with pytest.raises(UnknownEventAttribute, match=":host"):
        Recall("r", "SELECT count(*) FROM m h WHERE h.host = :host", event_attrs=("sid",))
    with pytest.raises(BadTemplate, match="period"):
        Recall("r", "SELECT count(*) FROM m", period=timedelta(0))


def _partial(op: Recall, rows: list[dict]) -> pd.DataFrame:
    return pandas_partials(op.split, pd.DataFrame(rows, columns=["sid", "x", "k"]))


def test_extrapolation_of_sums_and_counts_only():
    op = Recall("r", "SELECT h.sid, count(*) AS n, sum(h.x) AS s, avg(h.x) AS a, min(h.x) AS lo, "
                "max(h.x) AS hi, count(DISTINCT h.k) AS dk FROM m h GROUP BY h.sid", period=WEEK)
    st_ = op.start(op.task_for(EVENT))
    out = op.on_chunk(st_, 6, day(6), _partial(op, [("s1", 1.0, 1), ("s1", 3.0, 2)]))
    assert [o.kind for o in out] == [OutputKind.INSERT]
    assert out[0].row == {"sid": "s1", "n": 14.0, "s": 28.0, "a": 2.0, "lo": 1.0, "hi": 3.0, "dk": 2}
    assert out[0].covered == day(6) and op.factor(st_) == 7.0
    out = op.on_chunk(st_, 5, Interval(day(5).start, day(6).end), _partial(op, [("s1", 5.0, 1)]))
    assert out[0].kind is OutputKind.UPDATE
    assert out[0].row == {"sid": "s1", "n": 10.5, "s": 31.5, "a": 3.0, "lo": 1.0, "hi": 5.0, "dk": 2}
    assert out[0].covered == Interval(day(5).start, day(6).end)
    out = op.on_end(st_, EndReason.DONE)  # the exact value over what was read
    assert [(o.kind, o.row["n"], o.row["s"]) for o in out] == [(OutputKind.UPDATE, 3, 9.0)]


def test_extrapolation_with_rows_clipped_to_the_period():
    ts = T0 + WEEK + DAY / 2  # event at noon: the newest chunk is half inside the period
    op = Recall("r", "SELECT count(*) AS n FROM m h", period=WEEK, time_column="h.ts")
    st_ = op.start(op.task_for({**EVENT, "ts": ts}))
    [o] = op.on_chunk(st_, 7, day(7), pd.DataFrame({"a0_n": [3]}))
    assert o.covered == Interval(day(7).start, ts)
    assert o.row["n"] == pytest.approx(3 * 14)
    [o] = op.on_chunk(st_, 6, Interval(day(6).start, day(7).end), pd.DataFrame({"a0_n": [4]}))
    assert o.row["n"] == pytest.approx(7 * 7 / 1.5)


def test_whole_period_covered_means_no_adjustment_and_no_spurious_update():
    op = Recall("r", "SELECT count(*) AS n FROM m h", period=2 * DAY)
    st_ = op.start(op.task_for(EVENT))
    [o] = op.on_chunk(st_, 6, day(6), pd.DataFrame({"a0_n": [2]}))
    assert o.row == {"n": 4.0}
    [o] = op.on_chunk(st_, 5, Interval(day(5).start, day(6).end), pd.DataFrame({"a0_n": [3]}))
    assert o.row == {"n": 5} and isinstance(o.row["n"], int) and op.factor(st_) == 1.0
    assert op.on_end(st_, EndReason.DONE) == []  # nothing changed: nothing emitted


def test_cancelled_task_emits_nothing_and_frees_state():
    op = Recall("r", "SELECT count(*) AS n FROM m h", period=WEEK)
    st_ = op.start(op.task_for(EVENT))
    op.on_chunk(st_, 6, day(6), pd.DataFrame({"a0_n": [2]}))
    assert op.on_end(st_, EndReason.CANCELLED) == [] and st_.merge is None
    assert op.on_chunk(st_, 5, day(5), pd.DataFrame({"a0_n": [2]})) == []


TEMPLATE = ("SELECT h.sid, count(*) AS n, avg(h.x) AS a, sum(h.k) AS s FROM m h GROUP BY h.sid "
            "HAVING avg(h.x) < 50 ORDER BY s DESC NULLS LAST, h.sid LIMIT 3")
rows = st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(0, 100, allow_nan=False),
                          st.integers(0, 9), st.integers(0, 6)), max_size=60)


@settings(max_examples=30, deadline=None)
@given(data=rows, period=st.sampled_from([None, WEEK, 3 * DAY]))
def test_outputs_applied_in_order_reproduce_the_result(data, period):
    df = pd.DataFrame(data, columns=["sid", "x", "k", "day"]).astype({"x": "float64", "k": "int64"})
    op = Recall("r", TEMPLATE, period=period)
    st_ = op.start(op.task_for(EVENT))
    table = ResultTable()
    cov = None
    seqs = []
    for d in range(6, -1, -1):  # newest first
        cov = day(d) if cov is None else Interval(day(d).start, cov.end)
        part = df[df["day"] == d]
        outs = op.on_chunk(st_, d, cov, pandas_partials(op.split, part) if len(part) else part.iloc[:0])
        for o in outs:
            assert (o.operator, o.eid, o.event_ts, o.covered) == ("r", "ev1", T0 + WEEK, cov)
            table.apply(o)  # raises on an inconsistent revision
            seqs.append(o.seq)
        assert table.rows("ev1") == dict(st_.merge.result(op.factor(st_)))
    for o in op.on_end(st_, EndReason.DONE):
        table.apply(o)
        seqs.append(o.seq)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    want = []
    for sid, g in df.groupby("sid"):
        a = truth_agg("avg", g["x"])
        if a is not None and a < 50:
            want.append({"sid": sid, "n": len(g), "a": a, "s": int(g["k"].sum())})
    want = sorted(want, key=lambda r: (-r["s"], r["sid"]))[:3]
    got = sorted(table.rows("ev1").values(), key=lambda r: (-r["s"], r["sid"]))  # a table has no order
    assert len(got) == len(want) and all(rows_close(g, w) for g, w in zip(got, want, strict=True))


def test_a_group_leaving_having_is_deleted_and_can_come_back():
    op = Recall("r", "SELECT h.sid, avg(h.x) AS a FROM m h GROUP BY h.sid HAVING avg(h.x) > 50")
    st_ = op.start(op.task_for(EVENT))
    kinds = []
    for d, x in ((6, 90.0), (5, 0.0), (4, 200.0)):
        outs = op.on_chunk(st_, d, day(d), _partial(op, [("s1", x, 0)]))
        kinds.append([(o.kind.value, o.row["a"]) for o in outs])
    assert kinds == [[("insert", 90.0)], [("delete", 90.0)], [("insert", pytest.approx(290 / 3))]]


def test_a_group_falling_out_of_the_limit_is_deleted():
    op = Recall("r", "SELECT h.sid, max(h.x) AS m FROM m h GROUP BY h.sid ORDER BY m DESC LIMIT 1")
    st_ = op.start(op.task_for(EVENT))
    assert [(o.kind.value, o.key) for o in op.on_chunk(st_, 6, day(6), _partial(op, [("a", 1.0, 0)]))] == [
        ("insert", '["a"]')]
    outs = op.on_chunk(st_, 5, day(5), _partial(op, [("b", 2.0, 0)]))
    assert [(o.kind.value, o.key) for o in outs] == [("delete", '["a"]'), ("insert", '["b"]')]


def test_plain_rows_are_inserted_once_and_not_kept():
    op = Recall("r", "SELECT h.sid, h.x FROM m h WHERE h.sid = :sid")
    st_ = op.start(op.task_for(EVENT))
    a = op.on_chunk(st_, 6, day(6), pd.DataFrame({"sid": ["s1", "s1"], "x": [1.0, 1.0]}))
    b = op.on_chunk(st_, 5, Interval(day(5).start, day(6).end), pd.DataFrame({"sid": ["s1"], "x": [2.0]}))
    assert [o.kind for o in a + b] == [OutputKind.INSERT] * 3 and len({o.key for o in a + b}) == 3
    assert [o.seq for o in a + b] == [1, 2, 3] and b[0].covered == Interval(day(5).start, day(6).end)
    assert st_.emitted == {} and st_.merge.rows == []
    assert op.on_end(st_, EndReason.DONE) == []


def test_event_id_and_time_columns_by_name_or_as_eid_ts():
    op = Recall("r", "SELECT count(*) FROM m h WHERE h.sid = :sid", eid_attr="alert_id", ts_attr="at")
    assert op.task_for({"alert_id": 7, "at": T0, "sid": "s"}).eid == "7"
    assert op.task_for({"eid": "x", "ts": T0, "sid": "s"}).event_ts == T0
    with pytest.raises(UnknownEventAttribute, match="alert_id"):
        op.task_for({"at": T0, "sid": "s"})
