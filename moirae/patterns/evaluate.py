"""Evaluate DEFINE and MEASURES expressions with numpy (docs/PATTERNS.md).

One evaluator serves both uses: over a whole batch of a key's rows at once (row-local
predicates, T 3: one truth vector per symbol, folded into minterm bitmasks), and over one
row for one live run (predicates that read bound rows). Over a batch, an :class:`Env`
with a ``memo`` evaluates a sub-expression named in its ``keys`` once: what several
symbols, or several patterns run by one operator, share over the same rows (T 3's
minterms are built from the predicates' truth vectors, however many patterns read
them). NULL is NaN (numbers) or None
(anything else); a comparison with NULL is false, so a row whose predicate reads a NULL
does not match.

>>> import numpy as np
>>> from moirae.patterns.expr import parse_expr
>>> from moirae.patterns.tokens import Cursor
>>> env = Env({"x": np.array([1.0, 5.0, np.nan])}, n=3)
>>> truth(evaluate(parse_expr(Cursor("x > 2 OR x IS NULL", "p")), env), 3).tolist()
[False, True, True]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from moirae.patterns.expr import Col, Expr, Lit, Op, Prev, Ref, Special, walk


def column_array(s: pd.Series) -> np.ndarray:
    """A column as a plain numpy array: numbers as float64 with NaN, others as objects with None."""
    dt = s.dtype
    if isinstance(dt, np.dtype):  # plain numpy columns: no copy, no NA scan
        if dt.kind in "bfMO":
            return s.to_numpy()
        if dt.kind in "iu":
            return s.to_numpy().astype(np.float64)
    if pd.api.types.is_bool_dtype(dt):
        if s.isna().any():
            return s.to_numpy(dtype=object, na_value=None)
        return s.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(dt):
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    if pd.api.types.is_datetime64_any_dtype(dt):
        return s.to_numpy()
    return s.to_numpy(dtype=object, na_value=None)


class Env:
    """What an expression can read: ``cols`` (the current rows, ``n`` of them), a ``prev``
    function (name, offset -> array of the rows that many before), and ``ref``/``special``
    functions for bound rows and MATCH_NUMBER/CLASSIFIER (scalars). With ``memo`` (a dict
    shared by the expressions evaluated over the same ``cols``) and ``keys`` (node id ->
    a key naming its value over those rows: only for nodes that read neither PREV nor
    bound rows), each keyed node is evaluated once; a value in ``memo`` is never changed."""

    def __init__(self, cols: dict[str, np.ndarray], n: int,
                 prev: Callable[[str, int], np.ndarray] | None = None,
                 ref: Callable[[Ref], object] | None = None,
                 special: Callable[[str], object] | None = None,
                 memo: dict | None = None, keys: dict[int, str] | None = None):
        self.cols, self.n, self._prev, self._ref, self._special = cols, n, prev, ref, special
        self.memo, self.keys = memo, keys

    def prev(self, name: str, k: int) -> np.ndarray:
        if self._prev is None:
            return np.full(self.n, None, dtype=object)
        return self._prev(name, k)

    def ref(self, r: Ref) -> object:
        assert self._ref is not None, "bound-row reference outside a run"
        return self._ref(r)

    def special(self, kind: str) -> object:
        assert self._special is not None, f"{kind}() outside MEASURES"
        return self._special(kind)


def isnull(x) -> np.ndarray | bool:
    """Elementwise NULL test (NaN, None, NaT)."""
    return pd.isna(x)


def truth(x, n: int) -> np.ndarray:
    """``x`` as a boolean vector of length ``n``; NULL and NaN are false."""
    a = np.asarray(x)
    if a.dtype == bool:
        out = a
    elif a.dtype.kind in "fiu":
        out = (a != 0) & ~np.isnan(a.astype(np.float64))
    else:
        out = np.array([bool(v) if v is not None and not _nan(v) else False for v in a.ravel()],
                       dtype=bool).reshape(a.shape)
    return np.broadcast_to(out, (n,)) if out.shape != (n,) else out


def _nan(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


_COMPARE = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "%": np.fmod}
_UNARY = {"ABS": np.abs, "SQRT": np.sqrt, "LN": np.log, "EXP": np.exp, "FLOOR": np.floor,
          "CEIL": np.ceil, "CEILING": np.ceil}


def _nulls(x):
    """Where ``x`` is NULL: False when its type cannot hold one (fast path for plain arrays)."""
    if isinstance(x, np.ndarray):
        k = x.dtype.kind
        if k == "f":
            return np.isnan(x)
        if k in "biu":
            return False
        if k == "M":
            return np.isnat(x)
        return pd.isna(x)
    if isinstance(x, (bool, int, str)):
        return False
    return isnull(x)


def _compare(op: str, a, b) -> np.ndarray:
    nulls = np.logical_or(_nulls(a), _nulls(b))
    try:
        with np.errstate(invalid="ignore"):
            r = _COMPARE[op](a, b)
    except TypeError:
        aa, bb = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        nn = np.broadcast_to(nulls, aa.shape)
        r = np.array([False if z else _COMPARE[op](x, y) for x, y, z in zip(aa.ravel(), bb.ravel(), nn.ravel(), strict=True)],
                     dtype=bool).reshape(aa.shape)
    return np.logical_and(np.asarray(r, dtype=bool), np.logical_not(nulls))


def _num(x):
    a = np.asarray(x)
    if a.dtype == object:
        return np.array([np.nan if v is None else v for v in a.ravel()], dtype=np.float64).reshape(a.shape)
    return a.astype(np.float64) if a.dtype == bool else a


def memo_keys(exprs) -> dict[int, str]:
    """Node id -> memo key (its text, literals with their types) of every operator node of
    ``exprs`` that reads only the current row (see :class:`Env`).

    >>> from moirae.patterns.expr import parse_expr
    >>> from moirae.patterns.tokens import Cursor
    >>> a, b = (parse_expr(Cursor(t, "p")) for t in ("x > 2 AND y", "x > 2 AND PREV(y)"))
    >>> ka, kb = memo_keys([a]), memo_keys([b])
    >>> ka[id(a.args[0])] == kb[id(b.args[0])], id(b) in kb
    (True, False)
    """
    out: dict[int, str] = {}
    for e in exprs:
        for n in walk(e):
            if isinstance(n, Op) and not any(isinstance(m, (Prev, Ref, Special)) for m in walk(n)):
                out[id(n)] = repr(n)
    return out


def evaluate(e: Expr, env: Env):
    """The value of ``e`` in ``env``: an array of ``env.n`` values, or a scalar."""
    if env.memo is not None and env.keys:
        k = env.keys.get(id(e))
        if k is not None:
            v = env.memo.get(k)
            if v is None:
                v = env.memo[k] = _evaluate(e, env)
            return v
    return _evaluate(e, env)


def _evaluate(e: Expr, env: Env):
    if isinstance(e, Lit):
        return np.nan if e.value is None else e.value
    if isinstance(e, Col):
        return env.cols[e.name]
    if isinstance(e, Prev):
        return env.prev(e.name, e.n)
    if isinstance(e, Ref):
        v = env.ref(e)
        return np.nan if v is None else v
    if isinstance(e, Special):
        return env.special(e.kind)
    assert isinstance(e, Op)
    op, n = e.op, env.n
    if op == "AND":
        return truth(evaluate(e.args[0], env), n) & truth(evaluate(e.args[1], env), n)
    if op == "OR":
        return truth(evaluate(e.args[0], env), n) | truth(evaluate(e.args[1], env), n)
    if op == "NOT":
        return ~truth(evaluate(e.args[0], env), n)
    if op == "ISNULL":
        return np.broadcast_to(isnull(evaluate(e.args[0], env)), (n,))
    vals = [evaluate(a, env) for a in e.args]
    if op in _COMPARE:
        return _compare(op, vals[0], vals[1])
    if op == "IN":
        out = np.zeros(n, dtype=bool)
        for v in vals[1:]:
            out = out | _compare("=", vals[0], v)
        return out
    if op == "BETWEEN":
        return _compare(">=", vals[0], vals[1]) & _compare("<=", vals[0], vals[2])
    if op == "CASE":
        out = np.broadcast_to(np.asarray(vals[-1], dtype=object), (n,)).copy()
        for i in range(len(vals) - 3, -1, -2):
            out = np.where(truth(vals[i], n), vals[i + 1], out)
        return _tidy(out)
    if op == "||":
        return np.char.add(np.asarray(vals[0], dtype=str), np.asarray(vals[1], dtype=str)).astype(object)
    if op in _ARITH:
        with np.errstate(all="ignore"):
            return _ARITH[op](_num(vals[0]), _num(vals[1]))
    if op == "NEG":
        return -_num(vals[0])
    with np.errstate(all="ignore"):
        if op in _UNARY:
            return _UNARY[op](_num(vals[0]))
        if op == "ROUND":
            return np.round(_num(vals[0]), int(vals[1]) if len(vals) > 1 else 0)
        if op == "POWER":
            return np.power(_num(vals[0]), _num(vals[1]))
        if op == "MOD":
            return np.fmod(_num(vals[0]), _num(vals[1]))
        if op in ("LEAST", "GREATEST"):
            f = np.minimum if op == "LEAST" else np.maximum
            out = _num(vals[0])
            for v in vals[1:]:
                out = f(out, _num(v))
            return out
    if op == "COALESCE":
        out = np.broadcast_to(np.asarray(vals[-1], dtype=object), (n,)).copy()
        for v in reversed(vals[:-1]):
            out = np.where(isnull(v), out, v)
        return _tidy(out)
    raise AssertionError(f"unknown operator {op}")


def _tidy(a: np.ndarray) -> np.ndarray:
    """An object array of numbers (from CASE/COALESCE) back to float64 where it can."""
    try:
        return a.astype(np.float64)
    except (TypeError, ValueError):
        return a


__all__ = ["Env", "column_array", "evaluate", "isnull", "memo_keys", "truth"]
