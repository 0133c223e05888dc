"""Bound rows: what ``A.x``, ``FIRST``/``LAST`` and the aggregates read, for DEFINE
predicates evaluated per run and for MEASURES (docs/PATTERNS.md).

A run's bindings are a tuple of ``(seq, symbol index)`` in row order, ``seq`` being the
row's position in its key's stream. :class:`RowStore` gives a row's column values by
``seq``.

>>> import numpy as np
>>> store = RowStore({"x": np.array([1.0, 4.0, 7.0])}, base=10)
>>> from moirae.patterns.expr import Ref
>>> ref_value(Ref(None, "AVG", "A", "x"), ((10, 0), (12, 0)), ("A",), store)
4.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from moirae.patterns.errors import PredicateEvaluationError
from moirae.patterns.evaluate import Env, evaluate, isnull, truth
from moirae.patterns.expr import Expr, Ref, Special

Bindings = tuple[tuple[int, int], ...]


class RowStore:
    """Columns of a key's consecutive rows, the first having position ``base``.
    ``derived``: columns not held but read off another, ``name -> (column, convert)``
    (each value is ``convert`` of that column's value at the same row).

    >>> s = RowStore({"t": np.array([5, 6])}, 0, {"ts": ("t", lambda v: int(v) * 10)})
    >>> s.value("ts", 1), s.row(0, ["ts"])["ts"].tolist()
    (60, [50])
    """

    def __init__(self, cols: Mapping[str, np.ndarray], base: int,
                 derived: Mapping[str, tuple[str, Callable]] | None = None):
        self.cols, self.base = cols, base
        self.derived = derived or {}

    def value(self, col: str, seq: int):
        i = seq - self.base
        d = self.derived.get(col)
        a = self.cols[col if d is None else d[0]]
        if 0 <= i < len(a):
            return scalar(a[i] if d is None else d[1](a[i]))
        return None

    def row(self, seq: int, names: Sequence[str]) -> dict[str, np.ndarray]:
        i = seq - self.base
        out = {}
        for c in names:
            d = self.derived.get(c)
            out[c] = np.asarray([self.cols[c][i]]) if d is None else np.array([d[1](self.cols[d[0]][i])], dtype=object)
        return out


def scalar(v):
    """A numpy value as a plain Python value; NaN and NaT as None."""
    if isinstance(v, np.generic):
        v = v.item() if not isinstance(v, np.datetime64) else v
    try:
        if isnull(v):
            return None
    except (TypeError, ValueError):
        pass
    return v


def ref_value(r: Ref, bound: Bindings, symbols: Sequence[str], store: RowStore):
    """The value of ``r`` over the rows ``bound`` binds to its symbol (None when there are none)."""
    rows = [seq for seq, s in bound if symbols[s] == r.symbol]
    if r.kind == "COUNT" and r.name is None:
        return len(rows)
    if r.kind in ("FIRST", "LAST"):
        i = r.n if r.kind == "FIRST" else len(rows) - 1 - r.n
        return store.value(r.name, rows[i]) if 0 <= i < len(rows) else None  # type: ignore[arg-type]
    vals = [v for v in (store.value(r.name, seq) for seq in rows) if v is not None]  # type: ignore[arg-type]
    if r.kind == "COUNT":
        return len(vals)
    if not vals:
        return None
    if r.kind == "SUM":
        return sum(vals)
    if r.kind == "AVG":
        return sum(vals) / len(vals)
    return min(vals) if r.kind == "MIN" else max(vals)


def row_env(store: RowStore, seq: int, names: Sequence[str], bound: Bindings, symbols: Sequence[str],
            special=None) -> Env:
    """An environment of one row (``seq``) with ``bound`` rows and PREV from ``store``."""
    def prev(col: str, k: int) -> np.ndarray:
        return np.asarray([store.value(col, seq - k)], dtype=object)

    return Env(store.row(seq, names), 1, prev=prev, ref=lambda r: ref_value(r, bound, symbols, store),
               special=special)


def holds(e: Expr, sym: int, store: RowStore, seq: int, names: Sequence[str], bound: Bindings,
          symbols: Sequence[str], pattern: str, row_id: object) -> bool:
    """Whether symbol ``sym``'s DEFINE ``e`` holds on row ``seq`` bound to it after ``bound``."""
    env = row_env(store, seq, names, (*bound, (seq, sym)), symbols)
    try:
        return bool(truth(evaluate(e, env), 1)[0])
    except (TypeError, ValueError, ArithmeticError) as err:
        raise PredicateEvaluationError(
            f"pattern {pattern!r}: DEFINE {symbols[sym]} failed on row {row_id!r}: {err}") from None


def measures(cp_measures: Sequence[tuple[str, Expr]], store: RowStore, first: int, last: int,
             names: Sequence[str], bound: Bindings, symbols: Sequence[str], match_number: int,
             pattern: str) -> dict[str, object]:
    """MEASURES of a match over rows ``first``..``last``: unqualified columns read the last row."""
    def special(kind: str):
        if kind == "MATCH_NUMBER":
            return match_number
        return symbols[bound[-1][1]] if bound else None

    env = None
    out: dict[str, object] = {}
    for name, e in cp_measures:
        if isinstance(e, Ref):  # the common case, without numpy
            out[name] = ref_value(e, bound, symbols, store)
            continue
        if isinstance(e, Special):
            out[name] = special(e.kind)
            continue
        env = env or row_env(store, last, names, bound, symbols, special)
        try:
            v = evaluate(e, env)
        except (TypeError, ValueError, ArithmeticError) as err:
            raise PredicateEvaluationError(f"pattern {pattern!r}: MEASURES {name} failed: {err}") from None
        a = np.asarray(v)
        out[name] = scalar(a.ravel()[0] if a.ndim else a[()])
    return out


__all__ = ["Bindings", "RowStore", "holds", "measures", "ref_value", "row_env", "scalar"]
