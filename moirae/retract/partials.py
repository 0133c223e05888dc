"""Window aggregates as mergeable partials, so a window's archived rows never leave PostgreSQL.

``sum``, ``count``, ``avg``, ``min`` and ``max`` over a window are functions of a few
partials that combine without the rows: the row count and each aggregate's non-NULL
count and sum add up, its min and max combine by min and max. PostgreSQL gives each
window's partials over its archived rows but the excluded ones
(:func:`moirae.retract.hidden.archive_aggregator`: the removed rows, and the corrected
ones, whose archived values no longer count); :func:`of_rows` gives those of the rows a
change adds (late rows inserted, corrected rows at their new values: HUKA's update as a
deletion then an insertion, H 6), all windows at once with numpy; the sum of the two
(:meth:`Partials.merge`) gives each window's aggregates after the change
(:meth:`Partials.values`).

>>> from ananke.polynomial import AggSpec, PolyPlan
>>> plan = PolyPlan("ov", "window", aggs=(AggSpec("avg_bw", "avg", "bw", 0, "bw"), AggSpec("n", "count", "1", None, None)))
>>> archived = of_rows(plan, np.array([0, 0, 1]), np.array([[10.0, np.nan], [20.0, np.nan], [5.0, np.nan]]), 3)
>>> late = of_rows(plan, np.array([1, 2]), np.array([[7.0, np.nan], [np.nan, np.nan]]), 3)
>>> archived.merge(late).values(plan)
[{'avg_bw': 15.0, 'n': 2}, {'avg_bw': 6.0, 'n': 2}, {'avg_bw': None, 'n': 1}]
>>> archived.values(plan)[2] is None  # a window with no row has no aggregates
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def counts_rows(agg) -> bool:
    """Whether ``agg`` is ``count(1)`` (the window's row count: no column to read)."""
    return agg.fn == "count" and agg.column is None


@dataclass(frozen=True)
class Partials:
    """Per window (first axis) the rows ``n``; per window and aggregate of the plan (second
    axis) the non-NULL values ``cnt``, their ``sum`` (0 for none), ``lo`` and ``hi`` (their
    min and max; +inf and -inf for none)."""

    n: np.ndarray
    cnt: np.ndarray
    sum: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def empty(cls, windows: int, aggs: int) -> Partials:
        """The partials of ``windows`` windows with no row."""
        shape = (windows, aggs)
        return cls(np.zeros(windows, np.int64), np.zeros(shape, np.int64), np.zeros(shape),
                   np.full(shape, np.inf), np.full(shape, -np.inf))

    def merge(self, other: Partials) -> Partials:
        """The partials of both sets of rows together (the same windows, in the same order)."""
        return Partials(self.n + other.n, self.cnt + other.cnt, self.sum + other.sum,
                        np.minimum(self.lo, other.lo), np.maximum(self.hi, other.hi))

    def values(self, plan) -> list[dict[str, Any] | None]:
        """Each window's aggregates as SQL gives them (NULL as None; a count as an int), or
        None for a window with no row."""
        out: list[dict[str, Any] | None] = []
        n, cnt, total, lo, hi = (a.tolist() for a in (self.n, self.cnt, self.sum, self.lo, self.hi))
        for w in range(len(n)):
            if not n[w]:
                out.append(None)
                continue
            res: dict[str, Any] = {}
            for j, a in enumerate(plan.aggs):
                c = cnt[w][j]
                res[a.name] = (n[w] if counts_rows(a) else c if a.fn == "count" else None if not c
                               else total[w][j] if a.fn == "sum" else total[w][j] / c if a.fn == "avg"
                               else lo[w][j] if a.fn == "min" else hi[w][j])
            out.append(res)
        return out


def of_rows(plan, index: np.ndarray, values: np.ndarray, windows: int) -> Partials:
    """The partials of rows in ``windows`` windows: row ``r`` is in window ``index[r]``
    and holds ``values[r, j]`` for the plan's aggregate ``j`` (NaN: NULL; ignored for
    ``count(1)``)."""
    out = Partials.empty(windows, len(plan.aggs))
    if not len(index):
        return out
    index = np.asarray(index, dtype=np.int64)
    out.n[:] = np.bincount(index, minlength=windows)
    for j, a in enumerate(plan.aggs):
        if counts_rows(a):
            continue
        col = values[:, j]
        known = ~np.isnan(col)
        out.cnt[:, j] = np.bincount(index[known], minlength=windows)
        if a.fn in ("sum", "avg"):
            out.sum[:, j] = np.bincount(index[known], weights=col[known], minlength=windows)
        elif a.fn == "min":
            np.minimum.at(out.lo[:, j], index[known], col[known])
        elif a.fn == "max":
            np.maximum.at(out.hi[:, j], index[known], col[known])
    return out


def value_matrix(plan, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The rows' values of each aggregate's column, as :func:`of_rows` takes them (a
    ``count`` needs only whether a value is NULL: any other is 1)."""
    out = np.full((len(rows), len(plan.aggs)), np.nan)
    for j, a in enumerate(plan.aggs):
        if counts_rows(a):
            continue
        col = [r.get(a.column) for r in rows]
        if a.fn == "count":
            out[:, j] = [np.nan if v is None else 1.0 for v in col]
        else:
            out[:, j] = [np.nan if v is None else float(v) for v in col]
    return out
