"""Exactness of retraction maintenance (H 5): after random retractions and corrections,
the alerts kept by evaluating their polynomials plus the hidden ones found
(moirae/retract/hidden.py) equal re-running the event-query from scratch on the
corrected data, for a filter, a window aggregate and a join (hypothesis-generated
streams). Pure Python: the polynomials are built as the live capture stores them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke.poly_eval import evaluate
from ananke.poly_maint import window_of_sink
from ananke.polynomial import AggSpec, Poly, PolyPlan
from moirae.retract.hidden import hidden_rows, hidden_windows

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SIZE = 60_000_000  # one-minute windows, in µs
LIMIT = 60.0
WINDOW = PolyPlan("w", "window", 1, ("s",), ("bw",), (AggSpec("avg_bw", "avg", "bw", 0, "bw"),
                  AggSpec("n", "count", "1", None, None)), ("k",), "ts", SIZE, SIZE,
                  conditions=(f"(avg_bw > CAST({LIMIT:g} AS DOUBLE))",), structural=("k",))
FILTER = PolyPlan("f", "row", 1, ("s",), pre=("(bw > CAST(90 AS DOUBLE))",), ts="ts", mirror=("k", "ts", "bw"))
JOIN = PolyPlan("j", "row", 2, ("l", "r"), structural=("k", "ts"))

row_st = st.tuples(st.sampled_from("ab"), st.integers(0, 299), st.integers(0, 100).map(float))


def rows_of(raw, first: int = 1) -> list[dict]:
    return [{"_sid": first + i, "k": k, "ts": T0 + timedelta(seconds=s), "bw": bw} for i, (k, s, bw) in enumerate(raw)]


def change(rows, data):
    ids = [r["_sid"] for r in rows]
    removed = set(data.draw(st.lists(st.sampled_from(ids), max_size=6))) if ids else set()
    corrected = {sid: {"bw": data.draw(st.integers(0, 100).map(float))}
                 for sid in (data.draw(st.lists(st.sampled_from(ids), max_size=6)) if ids else []) if sid not in removed}
    after = [{**r, **corrected.get(r["_sid"], {})} for r in rows if r["_sid"] not in removed]
    return removed, corrected, after


def windows(rows) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        lo = T0 + timedelta(minutes=(r["ts"] - T0) // timedelta(minutes=1))
        out.setdefault(((r["k"],), lo, lo + timedelta(minutes=1)), []).append(r)
    return out


def window_alerts(rows) -> dict[tuple, float]:
    """The window event-query run from scratch: (keys, lo, hi) -> avg over LIMIT."""
    return {w: sum(m["bw"] for m in ms) / len(ms) for w, ms in windows(rows).items()
            if sum(m["bw"] for m in ms) / len(ms) > LIMIT}


def changed_rows(rows, removed, corrected):
    return [(r["_sid"], r["ts"], {k: v for k, v in r.items() if k != "_sid"}) for r in rows
            if r["_sid"] in removed or r["_sid"] in corrected]


@settings(max_examples=40, deadline=None)
@given(raw=st.lists(row_st, max_size=30), data=st.data())
def test_window_alerts_after_maintenance_equal_a_rerun(raw, data):
    rows = rows_of(raw)
    before = windows(rows)
    alerts = window_alerts(rows)
    removed, corrected, after = change(rows, data)
    kept = {}
    for w, avg in alerts.items():
        ms = before[w]
        poly = Poly(np.array([m["_sid"] for m in ms]), np.array([[m["bw"]] for m in ms]))
        ts = w[2] - timedelta(microseconds=1)
        assert window_of_sink(WINDOW, w[0], ts) == w
        out = evaluate(WINDOW, poly, {"k": w[0][0], "ts": ts, "avg_bw": avg, "n": len(ms)}, removed, corrected)
        assert out.holds is not None, out.why
        if out.holds:
            kept[w] = out.values["avg_bw"]

    def read(plan, wins):
        mine = {(w[0], w[1]) for w in wins}
        return [(r["_sid"], {k: v for k, v in r.items() if k != "_sid"}) for r in rows
                if ((r["k"],), T0 + timedelta(minutes=(r["ts"] - T0) // timedelta(minutes=1))) in mine]

    for w, values in hidden_windows(WINDOW, read, changed_rows(rows, removed, corrected), removed, corrected,
                                    set(kept)):
        assert w not in kept
        kept[w] = values["avg_bw"]
    want = window_alerts(after)
    assert set(kept) == set(want)
    assert all(abs(kept[w] - want[w]) < 1e-9 for w in want)


@settings(max_examples=40, deadline=None)
@given(raw=st.lists(row_st, max_size=30), data=st.data())
def test_filter_alerts_after_maintenance_equal_a_rerun(raw, data):
    rows = rows_of(raw)
    alerts = {r["_sid"] for r in rows if r["bw"] > 90}
    removed, corrected, after = change(rows, data)
    kept = {r["_sid"] for r in rows if r["_sid"] in alerts
            and evaluate(FILTER, Poly(np.array([r["_sid"]])), r, removed, corrected).holds}
    kept |= {sid for sid, _ in hidden_rows(FILTER, changed_rows(rows, removed, corrected), removed, corrected,
                                           alerts)}
    assert kept == {r["_sid"] for r in after if r["bw"] > 90}


@settings(max_examples=30, deadline=None)
@given(lraw=st.lists(row_st, max_size=12), rraw=st.lists(row_st, max_size=12), data=st.data())
def test_join_alerts_after_maintenance_equal_a_rerun(lraw, rraw, data):
    left, right = rows_of(lraw), rows_of(rraw, 1000)

    def joined(ls, rs):
        return {(a["_sid"], b["_sid"]) for a in ls for b in rs
                if a["k"] == b["k"] and abs(a["ts"] - b["ts"]) <= timedelta(seconds=5)}

    pairs = joined(left, right)
    removed, corrected, after = change(left + right, data)  # corrections of bw leave a pure join unchanged
    kept = {p for p in pairs if evaluate(JOIN, Poly(np.array(p), None, 2), {}, removed, corrected).holds}
    alive = {r["_sid"] for r in after}
    assert kept == joined([r for r in left if r["_sid"] in alive], [r for r in right if r["_sid"] in alive])


@settings(max_examples=40, deadline=None)
@given(raw=st.lists(row_st, max_size=30), late_raw=st.lists(row_st, min_size=1, max_size=8), data=st.data())
def test_window_alerts_after_late_rows_and_retractions_equal_a_rerun(raw, late_raw, data):
    """HUKA's mixes of inserts and deletes: late rows join their windows (an alert's window
    they join is recomputed, its polynomial lacking their terms), retracted rows leave."""
    rows = rows_of(raw)
    late = rows_of(late_raw, 10_000)
    before = windows(rows)
    alerts = window_alerts(rows)
    removed = set(data.draw(st.lists(st.sampled_from([r["_sid"] for r in rows]), max_size=6))) if rows else set()
    after = [r for r in rows if r["_sid"] not in removed]
    grown = set(windows(late))
    kept = {}
    for w, avg in alerts.items():
        if w in grown:
            continue
        ms = before[w]
        poly = Poly(np.array([m["_sid"] for m in ms]), np.array([[m["bw"]] for m in ms]))
        out = evaluate(WINDOW, poly, {"k": w[0][0], "ts": w[2] - timedelta(microseconds=1), "avg_bw": avg,
                                      "n": len(ms)}, removed)
        if out.holds:
            kept[w] = out.values["avg_bw"]

    def read(plan, wins):
        mine = {(w[0], w[1]) for w in wins}
        return [(r["_sid"], {k: v for k, v in r.items() if k != "_sid"}) for r in rows
                if ((r["k"],), T0 + timedelta(minutes=(r["ts"] - T0) // timedelta(minutes=1))) in mine]

    inserted = [(r["_sid"], r["ts"], {"k": r["k"], "bw": r["bw"]}) for r in late]
    for w, values in hidden_windows(WINDOW, read, changed_rows(rows, removed, {}), removed, {}, set(kept),
                                    inserted=inserted):
        assert w not in kept
        kept[w] = values["avg_bw"]
    want = window_alerts(after + late)
    assert set(kept) == set(want)
    assert all(abs(kept[w] - want[w]) < 1e-9 for w in want)
