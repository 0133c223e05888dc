"""Mergeable partial aggregates and the post-operators of a split template (M 4.3, 4.5.1).

Each chunk's query returns, per group, the partial columns :mod:`recall.split` pushed
down. :class:`GroupedMerge` folds them into per-group states chunk by chunk; states
merge exactly (count, sum, min, max, distinct sets) or by mergeable moments for the
variance family (Chan, Golub and LeVeque's parallel algorithm: ``n``, mean, ``M2``).
After each merge :meth:`GroupedMerge.result` applies HAVING, ORDER BY, LIMIT/OFFSET and
DISTINCT to produce the current result set. :class:`RowMerge` does the same for plain
SPJ templates (union, then DISTINCT / ORDER BY / LIMIT).

Online aggregation (M 4.5.1): ``result(factor)`` multiplies sums and counts by
``factor`` (the requested period over the history covered so far); avg, min, max,
variance and DISTINCT aggregates are not adjusted.

>>> a, b = Moments.of(2, 1.0, 0.0), Moments.of(2, 3.0, 0.0)  # {1, 1} and {3, 3}
>>> m = a.merge(b); (m.n, m.mean, m.m2)
(4, 2.0, 4.0)
>>> m.value("var_samp"), m.value("stddev_pop")
(1.3333333333333333, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
from sqlglot import exp

from recall.aggregate_expr import PostOps, Row, _number, compile_expr, group_key, to_py
from recall.errors import BadTemplate
from recall.split import Aggregate, SplitQuery, render

__all__ = ["GroupedMerge", "Moments", "Row", "RowMerge", "compile_expr", "group_key", "to_py"]


def _as_set(v: Any) -> frozenset:
    if v is None:
        return frozenset()
    if isinstance(v, str):  # a Postgres array literal such as '{1,2}' (text transfer)
        body = v.strip("{}")
        return frozenset(_number(x.strip('"')) for x in body.split(",") if x) if body else frozenset()
    return frozenset(to_py(x) for x in v if to_py(x) is not None)


class Moments:
    """Count, mean and sum of squared deviations (M2) of a multiset; merges exactly."""

    __slots__ = ("n", "mean", "m2")

    def __init__(self) -> None:
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    @classmethod
    def of(cls, n: int, mean: float | None, m2: float | None) -> Moments:
        out = cls()
        if n:
            out.n, out.mean, out.m2 = int(n), float(mean or 0.0), max(float(m2 or 0.0), 0.0)
        return out

    def merge(self, other: Moments) -> Moments:
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        out = Moments()
        out.n = n
        out.mean = self.mean + delta * other.n / n
        out.m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
        return out

    def value(self, func: str) -> float | None:
        pop = func.endswith("pop")
        denom = self.n if pop else self.n - 1
        if denom <= 0:
            return None
        var = self.m2 / denom
        return math.sqrt(var) if func.startswith("stddev") else var


def _partial(agg: Aggregate, values: list[Any]) -> Any:
    """The state one partial row carries for one aggregate."""
    if agg.distinct:
        return _as_set(values[0])
    if agg.func == "count":
        return to_py(values[0]) or 0
    if agg.func in ("sum", "avg"):
        s, n = to_py(values[0]), to_py(values[1]) or 0
        return (s if n else 0, n)
    if agg.func in ("min", "max"):
        return to_py(values[0])
    return Moments.of(to_py(values[0]) or 0, to_py(values[1]), to_py(values[2]))


def _merge(agg: Aggregate, a: Any, b: Any) -> Any:
    if agg.distinct:
        return a | b
    if agg.func == "count":
        return a + b
    if agg.func in ("sum", "avg"):
        return (a[0] + b[0], a[1] + b[1])
    if agg.func in ("min", "max"):
        if a is None or b is None:
            return b if a is None else a
        return (min if agg.func == "min" else max)(a, b)
    return a.merge(b)


def _final(agg: Aggregate, state: Any, factor: float) -> Any:
    if agg.distinct:
        if agg.func == "count":
            return len(state)
        if not state:
            return None
        return sum(state) if agg.func == "sum" else sum(state) / len(state)
    if agg.func == "count":
        return state if factor == 1 else state * factor
    if agg.func == "sum":
        s, n = state
        if not n:
            return None
        return s if factor == 1 else s * factor
    if agg.func == "avg":
        s, n = state
        return s / n if n else None
    if agg.func in ("min", "max"):
        return state
    return state.value(agg.func)


class GroupedMerge:
    """Per-group partial states of an aggregated template, merged chunk by chunk."""

    def __init__(self, spec: SplitQuery, params: Mapping[str, Any] | None = None) -> None:
        if not spec.aggregated:
            raise BadTemplate(f"{spec.template!r} has no aggregates; use RowMerge")
        self.spec = spec
        self.groups: dict[tuple, list[Any]] = {}
        keys = set(spec.group_sql) | {a.sql for a in spec.aggregates}
        self._outputs = [compile_expr(o, keys, params) for o in spec.outputs]
        self._having = compile_expr(spec.having, keys, params) if spec.having is not None else None
        self._order = [compile_expr(k.expr, keys | set(spec.columns), params) for k in spec.order]
        self._post = PostOps(spec, self._order)

    def add(self, rows: pd.DataFrame) -> int:
        """Merge one chunk's partial rows; returns how many partial rows there were.
        An empty frame (a chunk without rows, perhaps without columns) adds nothing."""
        spec = self.spec
        if len(rows) == 0:
            return 0
        missing = [c for c in (*spec.group_columns, *(c for a in spec.aggregates for c in a.columns))
                   if c not in rows.columns]
        if missing:
            raise BadTemplate(f"chunk result lacks partial column(s) {missing} of {spec.chunk_sql!r}")
        gcols = list(spec.group_columns)
        acols = [list(a.columns) for a in spec.aggregates]
        for rec in rows.to_dict("records"):
            key = tuple(to_py(rec[c]) for c in gcols)
            states = [_partial(a, [rec[c] for c in cols]) for a, cols in zip(spec.aggregates, acols, strict=True)]
            old = self.groups.get(key)
            if old is None:
                self.groups[key] = states
            else:
                self.groups[key] = [_merge(a, x, y) for a, x, y in zip(spec.aggregates, old, states, strict=True)]
        return len(rows)

    def result(self, factor: float = 1.0) -> list[tuple[str, Row]]:
        """The current result set as ``(key, row)`` pairs in output order, with sums and
        counts extrapolated by ``factor`` (M 4.5.1)."""
        spec = self.spec
        items = []
        for key, states in self.groups.items():
            env: dict[str, Any] = dict(zip(spec.group_sql, key, strict=True))
            for agg, st in zip(spec.aggregates, states, strict=True):
                env[agg.sql] = _final(agg, st, factor)
            if self._having is not None and self._having(env) is not True:
                continue
            row = {name: fn(env) for name, fn in zip(spec.columns, self._outputs, strict=True)}
            env.update(row)
            items.append((group_key(key), row, env))
        return self._post.finish(items)


class RowMerge:
    """The union of a plain SPJ template's chunk results, with its post-operators.

    Rows keep the key they got on arrival (their values as JSON, plus ``#n`` to tell
    duplicates apart), so a row's key is stable across chunks. With ORDER BY and LIMIT
    only the current top rows are kept; with LIMIT alone, the first rows to arrive.
    Without ORDER BY and LIMIT the result only grows (``append_only``): new rows are
    handed out once by :meth:`take_fresh` and not kept (DISTINCT keeps their keys).
    """

    def __init__(self, spec: SplitQuery) -> None:
        if spec.aggregated:
            raise BadTemplate(f"{spec.template!r} aggregates; use GroupedMerge")
        self.spec = spec
        self.append_only = not spec.order and spec.limit is None and spec.offset == 0
        self.rows: list[tuple[str, Row, dict]] = []
        self.fresh: list[tuple[str, Row]] = []
        self._dups: dict[str, int] = {}
        self._arrived = 0
        self._order = [self._order_fn(k.expr) for k in spec.order]
        self._post = PostOps(spec, self._order)

    def _order_fn(self, node) -> Callable[[Mapping], Any]:
        spec = self.spec
        if isinstance(node, exp.Column) and not node.table:
            name = node.name
            return lambda env: env.get(name)
        text = render(node)
        rendered = [render(o) for o in spec.outputs]
        if text in rendered:
            name = spec.columns[rendered.index(text)]
            return lambda env: env.get(name)
        raise BadTemplate(f"ORDER BY {text!r} must name an output column or be a plain expression")

    def add(self, rows: pd.DataFrame) -> int:
        spec = self.spec
        if len(rows) == 0:
            return 0
        names = [c for c in rows.columns if c not in spec.hidden]
        first_only = not spec.order and spec.limit is not None
        for rec in rows.to_dict("records"):
            if first_only and len(self.rows) >= spec.offset + spec.limit:
                break
            row = {c: to_py(rec[c]) for c in names}
            sig = group_key(row.values())
            self._arrived += 1
            if spec.distinct:
                if sig in self._dups:
                    continue
                self._dups[sig] = 1
                key = sig
            elif self.append_only:
                key = f"{sig}#{self._arrived}"
            else:
                n = self._dups.get(sig, 0)
                self._dups[sig] = n + 1
                key = f"{sig}#{n}"
            if self.append_only:
                self.fresh.append((key, row))
                continue
            env = {**row, **{h: to_py(rec.get(h)) for h in spec.hidden}}
            self.rows.append((key, row, env))
        if spec.order and spec.limit is not None:
            keep = {k for k, _ in self._post_all()[: spec.offset + spec.limit]}
            self.rows = [r for r in self.rows if r[0] in keep]
        return len(rows)

    def take_fresh(self) -> list[tuple[str, Row]]:
        """Rows added since the last call (append-only templates)."""
        out, self.fresh = self.fresh, []
        return out

    def _post_all(self) -> list[tuple[str, Row]]:
        saved = self.spec
        from dataclasses import replace

        self._post.spec = replace(saved, limit=None, offset=0)
        try:
            return self._post.finish(list(self.rows))
        finally:
            self._post.spec = saved

    def result(self, factor: float = 1.0) -> list[tuple[str, Row]]:
        return self._post.finish(list(self.rows))
