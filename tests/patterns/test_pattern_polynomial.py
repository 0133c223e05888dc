"""A row pattern's match in how-provenance polynomials (ananke/polynomial.py
PlanTracker.product, HUKA 4-5): one derivation, the product of its bound rows, so removing
any of them removes the match; a correction of a column that decides the match is not
judged by the polynomial, one of a column only the measures read leaves it standing."""

from __future__ import annotations

import numpy as np

from ananke.poly_eval import evaluate
from ananke.polynomial import PlanTracker, Poly, PolyPlan
from moirae.patterns import compile_pattern
from moirae.patterns.spark_operator import reads

SQL = """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES AVG(B.y) AS ay
  PATTERN (A B+) WITHIN INTERVAL '1' MINUTE DEFINE A AS x > 5, B AS x < LAST(A.x))"""


def _plan() -> PolyPlan:
    cp = compile_pattern(SQL, name="p", columns=["k", "ts", "x", "y"])
    t = PlanTracker()
    t.source(0, "s", "ts", ["k", "x", "y"])
    t.product(0, 1, reads(cp))
    return PolyPlan.from_dict(t.plan(1, "p").to_dict())  # as stored and read back


def test_a_match_is_the_product_of_its_bound_rows():
    plan = _plan()
    assert (plan.kind, plan.degree, plan.covered) == ("row", 0, True)
    assert set(plan.structural) == {"k", "ts", "x"}
    poly = Poly.from_bytes([11, 12, 13], None, plan.degree)
    assert poly.monomials() == [(11, 12, 13)]
    row = {"k": "a", "ay": 2.0}
    assert evaluate(plan, poly, row, removed={12}).support == 0
    kept = evaluate(plan, poly, row, removed={99})
    assert (kept.support, kept.holds) == (1, True)
    assert evaluate(plan, poly, row, corrected={12: {"y": 7.0}}).holds is True
    moved = evaluate(plan, poly, row, corrected={12: {"x": 0.0}})
    assert moved.holds is None and "x" in moved.why


def test_a_window_or_join_over_a_pattern_is_not_covered():
    t = PlanTracker()
    t.source(0, "s", "ts", ["k", "x"])
    t.product(0, 1, ("k", "ts", "x"))
    track, slots = t.window(1, [("n", "count", "1", False, False, None)], ["k"], 60_000_000, 60_000_000)
    assert (track.kind, track.covered, slots) == ("none", False, ())
    t.source(2, "r", "ts", ["k"])
    t.join(1, 2, 3, ["k"])
    assert not t.plan(3, "j").covered and "pattern" in t.plan(3, "j").why
    assert Poly(np.array([], dtype=np.int64), None, 0).terms == 0
