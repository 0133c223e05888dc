"""Maintenance under inserts and corrections: the windows a changed source tuple falls in (H 6).

A removal can only shrink what a polynomial supports, so evaluating the stored
polynomials (:mod:`ananke.poly_eval`) finds every affected sink tuple. An insert or a
correction can also *create* one: a window whose aggregate did not cross the threshold
before (the bad data hid an alert), or a tuple that a filter dropped and now passes.
Those have no polynomial yet, since only emitted sink tuples carry one.

They are found from the plan alone. A window's identity is its key values and its
bounds, and both follow from a source tuple's event time and key columns and the
window spec recorded in the plan (:func:`windows_of`; the same tumbling or sliding
alignment Spark uses, windows starting at multiples of the slide since the epoch). The
caller reads those windows' rows from the archive (the stream, keys and time range name
them; ``archive.contributors.window_rows`` reads the same set), applies the removals and
corrections, and :func:`recompute` gives each window's aggregates and whether the
condition holds, with the pre-aggregate filters applied to the corrected rows. A window
that holds now and has no alert is a hidden one; one whose alert exists is evaluated by its
polynomial as usual. For a plan of kind ``row`` (filters and maps of one source),
:func:`row_holds` says whether a corrected tuple now passes the filters.

Only windows over one source (plan kind ``window``, degree 1) are recomputed here; joins
and nested windows are recomputed by re-running the query on the affected time range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from ananke.ids import from_micros, micros
from ananke.poly_condition import Condition, Uncovered
from ananke.polynomial import Poly, PolyPlan

Window = tuple[tuple, datetime, datetime]


def window_bounds(ts_us: int, size_us: int, slide_us: int) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` bounds (µs) of every window of ``size``/``slide`` holding ``ts``,
    as Spark's ``window`` assigns them (start time 0).

    >>> window_bounds(7, 10, 10)
    [(0, 10)]
    >>> window_bounds(7, 10, 5)
    [(0, 10), (5, 15)]
    >>> window_bounds(-3, 10, 10)
    [(-10, 0)]
    """
    last = ts_us - (ts_us % slide_us)
    if size_us == slide_us:  # tumbling: the one window
        return [(last, last + size_us)]
    out = []
    lo = last
    while lo > ts_us - size_us:
        out.append((lo, lo + size_us))
        lo -= slide_us
    return sorted(out)


def windows_of(plan: PolyPlan, rows: Iterable[Mapping[str, Any]]) -> list[Window]:
    """Every ``(key values, lo, hi)`` window of ``plan`` that one of the source ``rows``
    (mappings holding ``plan.ts`` and ``plan.keys``) falls in, each once, sorted."""
    if plan.kind != "window" or not plan.size_us:
        raise ValueError(f"event-query {plan.sink!r} has no window over one source (kind {plan.kind!r})")
    seen: set[tuple] = set()
    for r in rows:
        keys = tuple(r[k] for k in plan.keys)
        for lo, hi in window_bounds(micros(r[plan.ts]), plan.size_us, plan.slide_us):
            seen.add((keys, lo, hi))
    return [(k, from_micros(lo), from_micros(hi)) for k, lo, hi in sorted(seen, key=lambda w: (w[1], repr(w[0])))]


def _value(plan: PolyPlan, arg: str, row: Mapping[str, Any]):
    v = Condition(arg).value(row) if arg not in row else row[arg]
    return None if isinstance(v, float) and v != v else v


def recompute(plan: PolyPlan, rows: Iterable[Mapping[str, Any]],
              only: Iterable[Window] | None = None) -> dict[Window, dict[str, Any]]:
    """Each window's aggregates over the given source ``rows`` (the archive's rows of
    those windows, corrections applied, removed rows left out), after the plan's
    pre-aggregate filters: ``{window: {agg name: value, "_n": rows, "_holds": bool or
    None}}``. ``_holds`` is None when a condition reads a column other than the keys and
    aggregates, or is not covered. ``only`` keeps the answer to those windows (a sliding
    window's rows also fall in neighbours the caller did not read whole)."""
    keep = None if only is None else {(k, micros(lo), micros(hi)) for k, lo, hi in only}
    if plan.kind != "window" or plan.degree != 1:
        raise ValueError(f"event-query {plan.sink!r}: only windows over one source are recomputed here")
    pre = [Condition(s) for s in plan.pre]
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if pre and not all(c.holds(r) for c in pre):
            continue
        keys = tuple(r[k] for k in plan.keys)
        for lo, hi in window_bounds(micros(r[plan.ts]), plan.size_us, plan.slide_us):
            if keep is None or (keys, lo, hi) in keep:
                groups[(keys, lo, hi)].append(r)
    conds = [Condition(s) for s in plan.conditions]
    out: dict[Window, dict[str, Any]] = {}
    for (keys, lo, hi), members in groups.items():
        res: dict[str, Any] = {"_n": len(members)}
        for a in plan.aggs:
            if a.fn == "count" and a.arg == "1":
                res[a.name] = len(members)
                continue
            try:
                vals = [v for v in (_value(plan, a.arg, r) for r in members) if v is not None]
            except Uncovered:
                res[a.name] = None
                continue
            res[a.name] = (len(vals) if a.fn == "count" else None if not vals
                           else sum(vals) if a.fn == "sum" else sum(vals) / len(vals) if a.fn == "avg"
                           else min(vals) if a.fn == "min" else max(vals) if a.fn == "max" else None)
        row = {**dict(zip(plan.keys, keys, strict=True)), **res}
        holds: bool | None = True
        for c in conds:
            h = c.holds(row) if c.columns <= set(row) else None
            holds = None if h is None else (holds and h if holds is not None else None)
        res["_holds"] = holds
        out[(keys, from_micros(lo), from_micros(hi))] = res
    return out


def row_holds(plan: PolyPlan, row: Mapping[str, Any]) -> bool | None:
    """Whether a (corrected) source tuple passes a ``row`` plan's filters (None: a filter
    is not covered)."""
    for sql in plan.pre:
        h = Condition(sql).holds(row)
        if not h:
            return h
    return True


def window_of_sink(plan: PolyPlan, keys: tuple, ts: datetime) -> Window:
    """The window a window sink tuple (its key values and its event time, ``window_time``
    = the end minus 1 µs, :mod:`ananke.query`) stands for."""
    hi = ts + timedelta(microseconds=1)
    return keys, hi - timedelta(microseconds=plan.size_us), hi


def late_terms(plan: PolyPlan, rows: Iterable[tuple[int, Mapping[str, Any]]]) -> dict[Window, Poly]:
    """Maintenance under insert (H 6) for a window over one source: the terms that late
    source tuples ``(id, values)`` (values holding ``plan.ts``, the keys and the
    aggregated columns) add to the polynomial of each window they fall in, as a
    :class:`~ananke.polynomial.Poly` per window (``x_id (x) values``, one term per tuple
    passing the pre-aggregate filters; NaN for a NULL or unreadable value). Adding them
    to a stored polynomial (:meth:`ananke.poly_store.PolyStore.add_terms`) gives the
    polynomial of the window over every row the archive holds.

    >>> from ananke.polynomial import AggSpec
    >>> plan = PolyPlan("q", "window", 1, ("m",), ("bw",), (AggSpec("a", "avg", "bw", 0, "bw"),), ("h",), "ts",
    ...                 10, 10, pre=("(bw > 1.0D)",))
    >>> t = from_micros(13)
    >>> got = late_terms(plan, [(5, {"ts": t, "h": "x", "bw": 7.0}), (6, {"ts": t, "h": "x", "bw": 0.5})])
    >>> [(k, micros(lo), p.ids.tolist(), p.values.tolist()) for (k, lo, _), p in got.items()]
    [(('x',), 10, [5], [[7.0]])]
    """
    if plan.kind != "window" or plan.degree != 1:
        raise ValueError(f"event-query {plan.sink!r}: only windows over one source are maintained here")
    pre = [Condition(sql) for sql in plan.pre]
    terms: dict[tuple, list[tuple[int, list[float]]]] = defaultdict(list)
    for sid, r in rows:
        if pre and not all(c.holds(r) for c in pre):
            continue
        vals = []
        for arg in plan.value_columns:
            try:
                v = _value(plan, arg, r)
            except Uncovered:
                v = None
            vals.append(float("nan") if v is None else float(v))
        keys = tuple(r[k] for k in plan.keys)
        for lo, hi in window_bounds(micros(r[plan.ts]), plan.size_us, plan.slide_us):
            terms[(keys, lo, hi)].append((int(sid), vals))
    out: dict[Window, Poly] = {}
    for (keys, lo, hi), ts in sorted(terms.items(), key=lambda kv: (kv[0][1], repr(kv[0][0]))):
        ids = np.array([sid for sid, _ in ts], dtype=np.int64)
        vals = np.array([v for _, v in ts], dtype=np.float64).reshape(len(ts), len(plan.value_columns))
        out[(keys, from_micros(lo), from_micros(hi))] = Poly(ids, vals if plan.value_columns else None, 1)
    return out
