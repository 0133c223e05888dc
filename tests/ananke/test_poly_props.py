"""How-provenance polynomials (H 4, H 6): evaluating a query's stored polynomials under random
removals and corrections gives what re-running the query from scratch on the changed
tuples gives, for filter, window-aggregate and join shapes (pure Python: the Spark side,
which writes the polynomials, is tested in test_poly_live.py).

The from-scratch side computes windows by enumerating window starts (not
``ananke.poly_maint.window_bounds``) and aggregates with ``statistics``; the polynomial side
only evaluates (:func:`ananke.poly_eval.evaluate`) and, for windows and tuples that had no
result before, recomputes the windows the changed tuples fall in (:mod:`ananke.poly_maint`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke.poly_eval import evaluate
from ananke.poly_maint import recompute, row_holds, window_of_sink, windows_of
from ananke.polynomial import AggSpec, Poly, PolyPlan

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SIZE, THRESHOLD = 10_000_000, 5.0  # µs, the condition's bound

row_st = st.tuples(st.integers(0, 40_000_000), st.sampled_from(["a", "b"]),
                   st.one_of(st.none(), st.integers(-5, 20).map(float)))


def _rows(raw, base=1):
    return [{"_sid": base + i, "ts": T0 + timedelta(microseconds=t), "k": k, "v": v} for i, (t, k, v) in enumerate(raw)]


def _change(rows, data):
    ids = [r["_sid"] for r in rows]
    removed = set(data.draw(st.lists(st.sampled_from(ids), max_size=len(ids)))) if ids else set()
    corrected = {}
    for sid in data.draw(st.lists(st.sampled_from(ids), max_size=4)) if ids else []:
        if sid not in removed:
            corrected[sid] = {"v": data.draw(st.one_of(st.none(), st.integers(-5, 20).map(float)))}
    after = [{**r, **corrected.get(r["_sid"], {})} for r in rows if r["_sid"] not in removed]
    return removed, corrected, after


# -- filter ---------------------------------------------------------------------------
FILTER = PolyPlan("f", "row", 1, ("s",), pre=("(v > CAST(5 AS DOUBLE))",), mirror=("k", "ts", "v"))


def _filtered(rows):
    return {r["_sid"] for r in rows if r["v"] is not None and r["v"] > THRESHOLD}


@settings(max_examples=60, deadline=None)
@given(raw=st.lists(row_st, max_size=25), data=st.data())
def test_filter_polynomials_match_a_rerun(raw, data):
    rows = _rows(raw)
    emitted = _filtered(rows)
    removed, corrected, after = _change(rows, data)
    got = set()
    for r in rows:
        if r["_sid"] in emitted:
            out = evaluate(FILTER, Poly(np.array([r["_sid"]])), r, removed, corrected)
            assert out.holds is not None, out.why
            if out.holds:
                got.add(r["_sid"])
    # tuples the filter dropped before: their corrected row decides
    got |= {r["_sid"] for r in after if r["_sid"] not in emitted and r["_sid"] in corrected and row_holds(FILTER, r)}
    assert got == _filtered(after)


# -- window aggregate -------------------------------------------------------------------
def _window_plan(slide):
    aggs = (AggSpec("s", "sum", "v", 0, "v"), AggSpec("c", "count", "v", 0, "v"), AggSpec("n", "count", "1", None, None),
            AggSpec("a", "avg", "v", 0, "v"), AggSpec("lo", "min", "v", 0, "v"), AggSpec("hi", "max", "v", 0, "v"))
    return PolyPlan("w", "window", 1, ("s",), ("v",), aggs, ("k",), "ts", SIZE, slide,
                    conditions=("(a > CAST(5 AS DOUBLE))",), structural=("k",))


def _scratch_windows(rows, slide):
    """{(k, lo_us): (members, aggregates)} for every non-empty window, by enumerating starts."""
    out: dict = {}
    for r in rows:
        us = int((r["ts"] - T0) / timedelta(microseconds=1)) + int(T0.timestamp()) * 1_000_000
        first = math.floor((us - SIZE) / slide) + 1
        for m in range(first, us // slide + 1):
            out.setdefault((r["k"], m * slide), []).append(r)
    res = {}
    for key, members in out.items():
        vals = [m["v"] for m in members if m["v"] is not None]
        aggs = {"s": sum(vals) if vals else None, "c": len(vals), "n": len(members),
                "a": sum(vals) / len(vals) if vals else None, "lo": min(vals) if vals else None,
                "hi": max(vals) if vals else None}
        res[key] = (members, aggs)
    return res


def _alerts(windows):
    return {k: a for k, (_, a) in windows.items() if a["a"] is not None and a["a"] > THRESHOLD}


def _close(a, b):
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, abs_tol=1e-9))


@settings(max_examples=60, deadline=None)
@given(raw=st.lists(row_st, max_size=25), slide=st.sampled_from([SIZE, SIZE // 2]), data=st.data())
def test_window_polynomials_match_a_rerun(raw, slide, data):
    plan = _window_plan(slide)
    rows = _rows(raw)
    before = _scratch_windows(rows, slide)
    alerts = _alerts(before)
    removed, corrected, after = _change(rows, data)
    want = _alerts(_scratch_windows(after, slide))
    got = {}
    for (k, lo), agg in alerts.items():
        members = before[(k, lo)][0]
        poly = Poly(np.array([m["_sid"] for m in members]),
                    np.array([[np.nan if m["v"] is None else m["v"]] for m in members]))
        ts = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=lo + SIZE - 1)
        assert window_of_sink(plan, (k,), ts)[1] == datetime.fromtimestamp(0, UTC) + timedelta(microseconds=lo)
        out = evaluate(plan, poly, {"k": k, **agg}, removed, corrected)
        assert out.holds is not None, out.why
        if out.holds:
            got[(k, lo)] = out.values
    # windows that had no alert: recompute the ones a changed tuple falls in
    changed = [r for r in rows if r["_sid"] in corrected or r["_sid"] in removed]
    touched = windows_of(plan, changed) if changed else []
    fresh = recompute(plan, [r for r in after if any(
        r["k"] == k[0] and lo <= r["ts"] < hi for k, lo, hi in touched)], only=touched)
    epoch = datetime.fromtimestamp(0, UTC)
    assert set(fresh) <= set(touched)
    for (keys, lo, _), res in fresh.items():
        key = (keys[0], int((lo - epoch) / timedelta(microseconds=1)))
        if key not in alerts and res["_holds"]:
            got[key] = res
    assert set(got) == set(want)
    for key, agg in want.items():
        for name in ("s", "c", "n", "a", "lo", "hi"):
            assert _close(got[key][name], agg[name]), (key, name, got[key][name], agg[name])


# -- join ---------------------------------------------------------------------------------
JOIN = PolyPlan("j", "row", 2, ("l", "r"), structural=("k", "ts"))
BOUND = timedelta(seconds=5)


def _joined(left, right):
    return {(a["_sid"], b["_sid"]) for a in left for b in right
            if a["k"] == b["k"] and a["ts"] - BOUND <= b["ts"] <= a["ts"] + BOUND}


@settings(max_examples=60, deadline=None)
@given(lraw=st.lists(row_st, max_size=12), rraw=st.lists(row_st, max_size=12), data=st.data())
def test_join_polynomials_match_a_rerun(lraw, rraw, data):
    left, right = _rows(lraw, 1), _rows(rraw, 1000)
    pairs = _joined(left, right)
    removed, _, _ = _change(left + right, data)
    got = {p for p in pairs if evaluate(JOIN, Poly(np.array(p), None, 2), {}, removed).support > 0}
    assert got == _joined([r for r in left if r["_sid"] not in removed], [r for r in right if r["_sid"] not in removed])
    # one sink tuple with two derivations (a union of both pairs): its support counts them
    if len(pairs) >= 2:
        p1, p2 = sorted(pairs)[:2]
        both = Poly(np.array([*p1, *p2]), None, 2)
        assert evaluate(JOIN, both, {}, removed).support == (p1 in got) + (p2 in got)


# -- many at once -----------------------------------------------------------------------
poly_st = st.lists(st.tuples(st.integers(1, 30), st.one_of(st.none(), st.integers(-5, 20).map(float))),
                   max_size=12)


@settings(max_examples=60, deadline=None)
@given(polys=st.lists(poly_st, max_size=8), data=st.data())
def test_evaluate_many_is_evaluate_of_each(polys, data):
    """The vectorized batch (one search of every polynomial's ids in the removed set)
    gives each sink tuple the outcome :func:`evaluate` gives it alone, windows and joins."""
    from ananke.poly_eval import evaluate_many

    plan = _window_plan(SIZE)
    removed = set(data.draw(st.lists(st.integers(1, 30), max_size=40)))
    corrected = {s: {"v": data.draw(st.one_of(st.none(), st.integers(-5, 20).map(float)))}
                 for s in data.draw(st.lists(st.integers(1, 30), max_size=4))}
    items = []
    for j, terms in enumerate(polys):
        poly = Poly(np.array([s for s, _ in terms], dtype=np.int64),
                    np.array([[np.nan if v is None else v] for _, v in terms]).reshape(len(terms), 1))
        vals = [v for _, v in terms if v is not None]
        items.append((j, poly, {"k": "a", "a": sum(vals) / len(vals) if vals else None, "n": len(terms)}))
    assert evaluate_many(plan, items, removed, corrected) == {
        sid: evaluate(plan, poly, payload, removed, corrected) for sid, poly, payload in items}
    pairs = [(j, Poly(np.array([s for s, _ in terms][: len(terms) // 2 * 2], dtype=np.int64), None, 2), {})
             for j, terms in enumerate(polys)]
    assert evaluate_many(JOIN, pairs, removed) == {sid: evaluate(JOIN, p, {}, removed) for sid, p, _ in pairs}
