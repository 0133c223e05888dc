"""Revision-aware downstream operators (M 4.6): inserts, updates and deletes; boundaries
drop state (fig. 11); event vs present analysis in joins (fig. 12)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recall.api import Output, OutputKind
from recall.revision_ops import (
    ResultTable,
    RevisionAggregate,
    RevisionError,
    RevisionFilter,
    RevisionJoin,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)


class Upstream:
    """Makes a consistent recall output stream for several events."""

    def __init__(self) -> None:
        self.table = ResultTable()
        self.seq: dict[str, int] = {}

    def out(self, eid: str, key: str, row: dict | None, ts: datetime = T0) -> Output | None:
        have = key in self.table.rows(eid)
        if row is None and not have:
            return None
        kind = OutputKind.DELETE if row is None else OutputKind.UPDATE if have else OutputKind.INSERT
        if row is None:
            row = dict(self.table.rows(eid)[key])
        self.seq[eid] = self.seq.get(eid, 0) + 1
        o = Output("recall", eid, ts, kind, self.seq[eid], key, row, None)
        self.table.apply(o)
        return o

    def boundary(self, eid: str, ts: datetime = T0) -> Output:
        self.seq[eid] = self.seq.get(eid, 0) + 1
        o = Output("mgr", eid, ts, OutputKind.BOUNDARY, self.seq[eid], "", {}, None)
        self.table.apply(o)
        return o


def kinds(outs):
    return [(o.kind.value, o.key, dict(o.row)) for o in outs]


def test_filter_inserts_updates_deletes():
    up, f = Upstream(), RevisionFilter("light", lambda r: r["cpu"] < 50)
    assert f.on_output(up.out("e1", "p1", {"cpu": 80})) == []
    assert kinds(f.on_output(up.out("e1", "p1", {"cpu": 30}))) == [("insert", "p1", {"cpu": 30})]
    assert kinds(f.on_output(up.out("e1", "p1", {"cpu": 20}))) == [("update", "p1", {"cpu": 20})]
    assert kinds(f.on_output(up.out("e1", "p1", {"cpu": 70}))) == [("delete", "p1", {"cpu": 20})]
    assert f.on_output(up.out("e1", "p1", None)) == []
    assert kinds(f.on_output(up.out("e1", "p2", {"cpu": 1}))) == [("insert", "p2", {"cpu": 1})]
    assert kinds(f.on_output(up.out("e1", "p2", None))) == [("delete", "p2", {"cpu": 1})]


def test_boundary_drops_state_and_later_revisions_are_late():
    up, f = Upstream(), RevisionFilter("light", lambda r: r["cpu"] < 50)
    f.on_output(up.out("e1", "p1", {"cpu": 10}))
    f.on_output(up.out("e2", "p1", {"cpu": 10}, T0 + MIN))
    assert f.state_size() == 2
    [b] = f.on_output(up.boundary("e1"))
    assert b.kind is OutputKind.BOUNDARY and b.eid == "e1" and b.operator == "light" and b.seq == 2
    assert f.state_size() == 1 and "e1" not in f.events
    stale = Output("recall", "e1", T0, OutputKind.UPDATE, 9, "p1", {"cpu": 90}, None)
    assert f.on_output(stale) == [] and f.late == 1


def test_ordered_boundaries_drop_everything_older_fig_11():
    """Fig. 11: state since the last boundary (10) is kept, so a revision of tuple 12
    is processed; a boundary at 13 then drops every tuple below 13."""
    up = Upstream()
    agg = RevisionAggregate("sum", ("g",), {"total": ("sum", "v")}, ordered_boundaries=True)
    for t in (10, 12, 14, 15, 16):
        agg.on_output(up.out(f"e{t}", "k", {"g": "x", "v": t}, T0 + t * MIN))
    agg.on_output(up.boundary("e10", T0 + 10 * MIN))
    assert set(agg.events) == {"e12", "e14", "e15", "e16"}
    assert kinds(agg.on_output(up.out("e12", "k", {"g": "x", "v": 100}, T0 + 12 * MIN))) == [
        ("update", '["x"]', {"g": "x", "total": 100})]
    agg.on_output(up.boundary("e13", T0 + 13 * MIN))
    assert set(agg.events) == {"e14", "e15", "e16"}
    assert agg.on_output(Output("recall", "e12", T0 + 12 * MIN, OutputKind.UPDATE, 99, "k", {"g": "x", "v": 1},
                                None)) == [] and agg.late == 1


def test_per_event_boundaries_keep_other_events():
    up = Upstream()
    f = RevisionFilter("all", lambda r: True)
    f.on_output(up.out("old", "k", {"v": 1}, T0))
    f.on_output(up.out("new", "k", {"v": 1}, T0 + MIN))
    f.on_output(up.boundary("new", T0 + MIN))  # the manager closes events in any order
    assert set(f.events) == {"old"}
    assert kinds(f.on_output(up.out("old", "k", {"v": 2}, T0))) == [("update", "k", {"v": 2})]


def test_aggregate_moves_rows_between_groups_and_removes_the_max():
    up, agg = Upstream(), RevisionAggregate("node", ("node",), {"worst": ("max", "cpu"), "n": ("count", None)})
    assert kinds(agg.on_output(up.out("e", "p1", {"node": "a", "cpu": 90}))) == [
        ("insert", '["a"]', {"node": "a", "worst": 90, "n": 1})]
    agg.on_output(up.out("e", "p2", {"node": "a", "cpu": 10}))
    assert kinds(agg.on_output(up.out("e", "p1", {"node": "b", "cpu": 90}))) == [
        ("update", '["a"]', {"node": "a", "worst": 10, "n": 1}),
        ("insert", '["b"]', {"node": "b", "worst": 90, "n": 1})]
    assert kinds(agg.on_output(up.out("e", "p2", None))) == [("delete", '["a"]', {"node": "a", "worst": 10, "n": 1})]
    with pytest.raises(RevisionError, match="median"):
        RevisionAggregate("x", ("g",), {"m": ("median", "v")})


actions = st.lists(st.tuples(st.sampled_from(["e1", "e2"]), st.sampled_from(["p1", "p2", "p3", "p4"]),
                             st.one_of(st.none(), st.tuples(st.sampled_from("ab"), st.integers(0, 100)))),
                   max_size=40)


def _from_scratch(rows: dict) -> dict:
    """What filter cpu < 50 then max/count per node gives over a final input table."""
    out: dict = {}
    for r in rows.values():
        if r["cpu"] < 50:
            g = out.setdefault(f'["{r["node"]}"]', {"node": r["node"], "worst": r["cpu"], "n": 0})
            g["worst"], g["n"] = max(g["worst"], r["cpu"]), g["n"] + 1
    return out


@settings(max_examples=40, deadline=None)
@given(acts=actions)
def test_filter_then_aggregate_equals_recomputation(acts):
    up = Upstream()
    f = RevisionFilter("light", lambda r: r["cpu"] < 50)
    agg = RevisionAggregate("node", ("node",), {"worst": ("max", "cpu"), "n": ("count", None)})
    table = ResultTable()
    for eid, key, val in acts:
        o = up.out(eid, key, None if val is None else {"node": val[0], "cpu": val[1]})
        if o is None:
            continue
        for fo in f.on_output(o):
            for ao in agg.on_output(fo):
                table.apply(ao)
        for eid2 in ("e1", "e2"):
            assert table.rows(eid2) == _from_scratch(up.table.rows(eid2))
    for eid in ("e1", "e2"):
        for fo in f.on_output(up.boundary(eid)):
            for ao in agg.on_output(fo):
                table.apply(ao)
    assert f.state_size() == 0 and agg.state_size() == 0 and table.closed == {"e1", "e2"}


def _ping(node: str, minute: int, ms: float) -> dict:
    return {"node": node, "ts": T0 + minute * MIN, "ping": ms}


@pytest.mark.parametrize("analysis", ["event", "present"])
def test_join_fig_12(analysis):
    """Fig. 12: the update of tuple 12 joins, with event analysis, with the other
    stream's data valid at 12; with present analysis, with the most recent (> 15)."""
    up, j = Upstream(), RevisionJoin("j", "node", analysis=analysis)
    for m, ms in ((9, 1.0), (11, 2.0), (15, 3.0)):
        j.on_other(_ping("n1", m, ms))
    ev_ts = T0 + 12 * MIN
    [o] = j.on_output(up.out("e", "n1", {"node": "n1", "load": 0.9}, ev_ts))
    assert o.kind is OutputKind.INSERT
    assert o.row["ping"] == (2.0 if analysis == "event" else 3.0)
    newer = j.on_other(_ping("n1", 17, 4.0))
    [o] = j.on_output(up.out("e", "n1", {"node": "n1", "load": 0.1}, ev_ts))
    assert o.kind is OutputKind.UPDATE and o.row["load"] == 0.1
    if analysis == "event":
        assert newer == [] and o.row["ping"] == 2.0 and o.row["ts"] == T0 + 11 * MIN
    else:
        assert [n.row["ping"] for n in newer] == [4.0] and o.row["ping"] == 4.0


def test_join_event_analysis_validity_and_late_other_rows():
    up, j = Upstream(), RevisionJoin("j", ("node", "host"), analysis="event", validity=5 * MIN)
    j.on_other({"host": "n1", "ts": T0, "ping": 1.0})
    assert j.on_output(up.out("e", "k", {"node": "n1"}, T0 + 10 * MIN)) == []  # too old to be valid
    [o] = j.on_other({"host": "n1", "ts": T0 + 8 * MIN, "ping": 2.0})  # late, but valid at the event
    assert o.kind is OutputKind.INSERT and o.row["ping"] == 2.0 and o.row["host"] == "n1"
    assert j.on_other({"host": "n1", "ts": T0 + 11 * MIN, "ping": 3.0}) == []  # after the event
    [o] = j.on_output(up.out("e", "k", None, T0 + 10 * MIN))
    assert o.kind is OutputKind.DELETE


def test_join_boundary_prunes_other_stream_but_keeps_the_valid_row():
    up, j = Upstream(), RevisionJoin("j", "node", analysis="event")
    for m in range(10):
        j.on_other(_ping("n1", m, float(m)))
    j.on_output(up.out("e", "k", {"node": "n1"}, T0 + 5 * MIN))
    j.on_output(up.boundary("e", T0 + 5 * MIN))
    assert [r[0] for r in j.other["n1"]] == [T0 + m * MIN for m in range(5, 10)]
    [o] = j.on_output(up.out("e2", "k", {"node": "n1"}, T0 + 6 * MIN))
    assert o.row["ping"] == 6.0
    present = RevisionJoin("p", "node", analysis="present")
    for m in range(10):
        present.on_other(_ping("n1", m, float(m)))
    assert len(present.other["n1"]) == 1
    with pytest.raises(RevisionError, match="analysis"):
        RevisionJoin("x", "node", analysis="past")


steps = st.lists(st.one_of(
    st.tuples(st.just("left"), st.sampled_from(["k1", "k2", "k3"]),
              st.one_of(st.none(), st.sampled_from(["n1", "n2"]))),
    st.tuples(st.just("right"), st.sampled_from(["n1", "n2"]), st.integers(0, 20))), max_size=40)


@settings(max_examples=40, deadline=None)
@given(steps=steps, analysis=st.sampled_from(["event", "present"]))
def test_join_output_equals_recomputation(steps, analysis):
    """Whatever the interleaving of recall revisions and other-stream rows, the applied
    join outputs equal the join recomputed from the final state of both inputs."""
    up, j, table = Upstream(), RevisionJoin("j", "node", analysis=analysis), ResultTable()
    ev_ts = T0 + 10 * MIN
    right: list[dict] = []
    for i, (side, a, b) in enumerate(steps):
        if side == "left":
            o = up.out("e", a, None if b is None else {"node": b, "i": i}, ev_ts)
            outs = [] if o is None else j.on_output(o)
        else:
            right.append({"node": a, "ts": T0 + b * MIN, "ping": float(i)})
            outs = j.on_other(right[-1])
        for o in outs:
            table.apply(o)
    want = {}
    for key, left in up.table.rows("e").items():
        cands = [(r["ts"], n, r) for n, r in enumerate(right) if r["node"] == left["node"]]
        if analysis == "event":
            cands = [c for c in cands if c[0] <= ev_ts]
        if cands:
            r = max(cands, key=lambda c: (c[0], c[1]))[2]
            want[key] = {**left, "other_node": r["node"], "ts": r["ts"], "ping": r["ping"]}
    assert table.rows("e") == want


def test_chain_routes_other_stream_rows_and_rejects_misuse():
    from recall.revision_ops import Chain

    f = RevisionFilter("f", lambda r: r.get("ping", 0) < 10)
    c = Chain(RevisionJoin("j", "node", analysis="present"), f)
    up = Upstream()
    assert c.on_output(up.out("e", "k", {"node": "n1"})) == []  # nothing to join with yet
    [o] = c.on_other("j", _ping("n1", 1, 5.0))
    assert (o.operator, o.kind, o.row["ping"]) == ("f", OutputKind.INSERT, 5.0)
    [o] = c.on_other("j", _ping("n1", 2, 50.0))
    assert (o.operator, o.kind) == ("f", OutputKind.DELETE)
    [b] = c.on_output(up.boundary("e"))
    assert b.kind is OutputKind.BOUNDARY and c.state_size() == 1  # the present ping only
    with pytest.raises(RevisionError, match="not a join"):
        c.on_other("f", {})
    with pytest.raises(RevisionError, match="no operator"):
        c.on_other("x", {})
    with pytest.raises(RevisionError, match="unique"):
        Chain(f, f)
