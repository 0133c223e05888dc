"""Evaluating sink tuples' polynomials under removed and corrected source tuples (H 4, H 6).

A removal sets the removed tuples' variables to 0, every other variable to 1: the
polynomial's value is then the number of derivations left, its *support*; 0 means the
sink tuple no longer exists. A window's aggregates are recomputed over the surviving
terms of its semimodule sum, with corrected values in place, and the event-query's
condition (the filters after the aggregate, :class:`~ananke.poly_condition.Condition`) is
checked on the sink tuple's row with the new values. Nothing re-runs the query, reads the
source or starts Spark.

What is not covered is said, not guessed (``Outcome.holds is None`` with ``why``): a
correction of a column the plan groups or joins by, or reads in a filter before the
aggregate (it moves the tuple between results: recompute the windows from the archive,
:mod:`ananke.poly_maint`), of an aggregate's expression argument, and every plan whose
shape :class:`~ananke.polynomial.PolyPlan` marks uncovered. The support is exact for
all of them.

>>> import numpy as np
>>> from ananke.polynomial import AggSpec, Poly, PolyPlan
>>> plan = PolyPlan("ov", "window", streams=("m",), value_columns=("bw",), keys=("sid",), ts="ts",
...                 aggs=(AggSpec("avg_bw", "avg", "bw", 0, "bw"),), conditions=("(avg_bw > 1000.0D)",))
>>> poly = Poly(np.array([1, 2, 3]), np.array([[900.0], [1200.0], [1500.0]]))
>>> row = {"sid": "s1", "avg_bw": 1200.0}
>>> evaluate(plan, poly, row, removed={3})
Outcome(support=2, values={'avg_bw': 1050.0}, holds=True, changed=True, why='')
>>> evaluate(plan, poly, row, corrected={3: {"bw": 300.0}}).holds
False
>>> evaluate(plan, poly, row, removed={1, 2, 3}).support
0
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ananke.poly_condition import Condition
from ananke.polynomial import AggSpec, Poly, PolyPlan


@dataclass(frozen=True)
class Outcome:
    """One sink tuple re-evaluated: its support (derivations left; 0: gone), its new
    aggregates (windows), whether the event-query's condition still holds (None: not
    covered, see ``why``), and whether anything differs from what was emitted."""

    support: int
    values: dict[str, Any] = field(default_factory=dict)
    holds: bool | None = None
    changed: bool = False
    why: str = ""


@lru_cache(maxsize=256)
def _condition(sql: str) -> Condition:
    return Condition(sql)


def conditions(plan: PolyPlan) -> list[Condition]:
    """The plan's compiled conditions (cached per SQL text)."""
    return [_condition(c) for c in plan.conditions]


def _id_array(ids: Collection[int]) -> np.ndarray:
    """``ids`` as a sorted array of distinct int64 (the form :func:`_member` searches)."""
    if isinstance(ids, np.ndarray):
        return np.unique(ids.astype(np.int64, copy=False))
    return np.unique(np.fromiter(ids, dtype=np.int64, count=len(ids)))


def _member(ids: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Boolean mask of the entries of ``ids`` found in ``sorted_ids`` (:func:`_id_array`):
    one binary search each, so a large removed set costs its size once, not per polynomial.

    >>> _member(np.array([5, 1, 9, 2]), np.array([1, 2, 7]))
    array([False,  True, False,  True])
    """
    if sorted_ids.size == 0 or ids.size == 0:
        return np.zeros(ids.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return sorted_ids[pos] == ids


def _survivors(poly: Poly, removed: Collection[int]) -> np.ndarray:
    """Boolean mask of the monomials none of whose variables was removed."""
    if not len(removed):
        return np.ones(poly.terms, dtype=bool)
    gone = _member(poly.ids, _id_array(removed))
    return _alive(poly, gone)


def _alive(poly: Poly, gone: np.ndarray) -> np.ndarray:
    """The monomials of ``poly`` none of whose ids is marked in ``gone`` (one flag per id)."""
    return np.asarray(~gone.reshape(poly.terms, poly.degree).any(axis=1))


def aggregate(spec: AggSpec, values: np.ndarray | None, n: int) -> Any:
    """``spec`` over ``n`` surviving terms whose values (one column per slot) are
    ``values``, with SQL's NULL rules: NaN is NULL and is skipped; an aggregate over no
    non-NULL value is NULL (None), except ``count``, which is 0.

    >>> aggregate(AggSpec("s", "sum", "v", 0, "v"), np.array([[1.0], [np.nan], [2.0]]), 3)
    3.0
    >>> aggregate(AggSpec("c", "count", "1", None, None), None, 3), aggregate(AggSpec("c", "count", "v", 0, "v"), np.array([[np.nan]]), 1)
    (3, 0)
    """
    if spec.fn == "count" and spec.slot is None:
        return n
    if spec.slot is None or values is None:
        return None
    col = values[:, spec.slot]
    col = col[~np.isnan(col)]
    if spec.fn == "count":
        return int(col.size)
    if col.size == 0:
        return None
    if spec.fn == "sum":
        return float(col.sum())
    if spec.fn == "avg":
        return float(col.mean())
    return float(col.min() if spec.fn == "min" else col.max())


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-12)


def _typed(new, old):
    """``new`` in the type the sink emitted (an integer sum stays an integer)."""
    if new is not None and isinstance(old, int) and not isinstance(old, bool):
        return int(round(new))
    return new


def _touches(plan: PolyPlan, cols: Iterable[str]) -> list[str]:
    """The corrected columns that move a tuple between results (keys, join columns, the
    pre-aggregate filters' columns)."""
    pre_cols: set[str] = set()
    for sql in plan.pre:
        c = _condition(sql)
        pre_cols |= set(c.columns) if c.compiled else {"*"}
    return sorted(c for c in cols if c in plan.structural or c in pre_cols or "*" in pre_cols)


def evaluate(plan: PolyPlan, poly: Poly, payload: Mapping[str, Any], removed: Collection[int] = (),
             corrected: Mapping[int, Mapping[str, Any]] | None = None) -> Outcome:
    """Re-evaluate one sink tuple (``payload``: its row as emitted) with the tuples
    ``removed`` gone and the values ``corrected`` (source id -> {column: new value})."""
    removed = set(removed)
    return _evaluate(plan, poly, payload, _survivors(poly, removed), removed, corrected or {})


def _evaluate(plan: PolyPlan, poly: Poly, payload: Mapping[str, Any], alive: np.ndarray, removed: Collection[int],
              corrected: Mapping[int, Mapping[str, Any]]) -> Outcome:
    """:func:`evaluate` with the surviving monomials ``alive`` already known."""
    support = int(alive.sum())
    hit = [i for i in poly.variables() if i in corrected and i not in removed] if corrected else []
    if plan.kind != "window":
        return _evaluate_row(plan, poly, payload, support, hit, corrected)
    vals = poly.values[alive] if poly.values is not None else None
    why = "" if plan.covered else plan.why
    if hit:
        touched = _touches(plan, {c for i in hit for c in corrected[i]})
        if touched:
            why = why or f"a correction of {touched}, which the query groups, joins or filters by: recompute the window"
        vals = _corrected(plan, poly, alive, vals, corrected, hit) if vals is not None else None
        if isinstance(vals, str):
            why, vals = why or vals, poly.values[alive] if poly.values is not None else None
    new = {a.name: _typed(aggregate(a, vals, support), payload.get(a.name)) for a in plan.aggs
           if a.slot is not None or (a.fn == "count" and a.arg == "1")}
    changed = support != poly.terms or any(not _same(v, payload.get(k)) for k, v in new.items())
    if support == 0:
        return Outcome(0, new, False, True, "")
    if why:
        return Outcome(support, new, None, changed, why)
    row = {**payload, **new}
    holds: bool | None = True
    for cond in conditions(plan):
        h = cond.holds(row)
        if h is None:
            return Outcome(support, new, None, changed, cond.why or f"condition {cond.sql!r} reads a column not kept")
        holds = holds and h
    return Outcome(support, new, holds, changed, "")


def _corrected(plan: PolyPlan, poly: Poly, alive: np.ndarray, vals: np.ndarray, corrected, hit) -> np.ndarray | str:
    """The surviving terms' values with the corrections in place (or why not covered)."""
    vals = vals.copy()
    live_ids = poly.ids.reshape(poly.terms, poly.degree)[alive][:, 0]
    for sid in hit:
        change = corrected[sid]
        rows = np.nonzero(live_ids == sid)[0]
        for a in plan.aggs:
            if a.slot is None:
                continue
            if a.column is None:
                if any(c in a.arg for c in change):
                    return f"{a.name} aggregates the expression {a.arg!r}, whose input was corrected"
                continue
            if a.column in change:
                v = change[a.column]
                vals[rows, a.slot] = np.nan if v is None else float(v)
    return vals


def _evaluate_row(plan: PolyPlan, poly: Poly, payload, support: int, hit, corrected) -> Outcome:
    """A sink tuple that is one source tuple or one joined combination, passed through
    filters and maps: it stands while its support does; a correction of a tuple it came
    from is covered when it touches no column the query filters or joins by."""
    if support == 0:
        return Outcome(0, {}, False, True, "")
    if not plan.covered:
        return Outcome(support, {}, None, support != poly.terms, plan.why)
    if hit:
        cols = {c for i in hit for c in corrected[i]}
        touched = _touches(plan, cols)
        if not touched and plan.kind == "row":
            return Outcome(support, {}, True, True, "")
        pre = [_condition(sql) for sql in plan.pre]
        if (plan.kind == "row" and plan.degree == 1 and set(touched) <= set(plan.structural) | set(plan.mirror)
                and not set(touched) & set(plan.structural)
                and all(c.compiled and c.columns <= set(plan.mirror) for c in pre)):
            row = {**payload, **corrected[hit[0]]}  # one source tuple: its filters on its corrected values
            holds = all(c.holds(row) for c in pre)
            return Outcome(support, {k: row[k] for k in cols if k in payload}, holds, True, "")
        return Outcome(support, {}, None, True, f"a correction of {touched}, which the query filters or joins by: "
                                               "recompute the tuple")
    return Outcome(support, {}, True, support != poly.terms, "")


def evaluate_many(plan: PolyPlan, items: Iterable[tuple[int, Poly, Mapping[str, Any]]], removed: Collection[int] = (),
                  corrected: Mapping[int, Mapping[str, Any]] | None = None) -> dict[int, Outcome]:
    """:func:`evaluate` for each ``(sink id, polynomial, payload)``, the same outcomes.

    The removed ids are sorted once and every polynomial's ids are looked up in them in
    one vectorized search (the cost grows with the ids named, not with their product)."""
    items = list(items)
    corrected = corrected or {}
    removed_set = removed if isinstance(removed, (set, frozenset)) else set(removed)
    if not items:
        return {}
    if removed_set:
        ids = np.concatenate([poly.ids for _, poly, _ in items])
        gone = _member(ids, _id_array(removed_set))
        ends = np.cumsum([len(poly.ids) for _, poly, _ in items]).tolist()
        starts = [0, *ends[:-1]]
        alive = [_alive(poly, gone[a:b]) for (_, poly, _), a, b in zip(items, starts, ends, strict=True)]
    else:
        alive = [np.ones(poly.terms, dtype=bool) for _, poly, _ in items]
    return {sid: _evaluate(plan, poly, payload, mask, removed_set, corrected)
            for (sid, poly, payload), mask in zip(items, alive, strict=True)}
