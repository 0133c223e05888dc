"""Post-operator expressions of a split template: HAVING, ORDER BY and select items
evaluated over merged aggregates (M 4.3), with SQL's NULL semantics, plus value
normalisation and the ordering / LIMIT / DISTINCT step shared by the merges.

>>> import sqlglot
>>> f = compile_expr(sqlglot.parse_one("COUNT(*) > 2 AND h.sid <> 'z'", dialect="postgres"), {"COUNT(*)", "h.sid"})
>>> f({"COUNT(*)": 3, "h.sid": "a"}), f({"COUNT(*)": None, "h.sid": "a"})
(True, None)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from sqlglot import exp

from recall.errors import BadTemplate
from recall.split import SplitQuery, render

Row = dict[str, Any]


def to_py(v: Any) -> Any:
    """A value from a result frame as a plain Python value; SQL NULL (None, NaN, NaT,
    pd.NA) as None, integral Decimals as int."""
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, float | np.floating):
        return None if math.isnan(v) else float(v)
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.datetime64):
        return pd.Timestamp(v).tz_localize("UTC").to_pydatetime()
    return v


def _number(s: str) -> Any:
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


def group_key(values: Iterable[Any]) -> str:
    """The ``Output.key`` of a group: its key values as JSON.

    >>> group_key(["s1", 3])
    '["s1", 3]'
    """
    return json.dumps([to_py(v) for v in values], default=_json_default)


def _json_default(v: Any) -> str:
    if isinstance(v, datetime | date):
        return v.isoformat()
    return str(v)


def compile_expr(node, keys: set[str], params: Mapping[str, Any] | None = None) -> Callable[[Mapping], Any]:
    """Compile a post-operator expression (HAVING, ORDER BY, a select item) to a function
    of an environment mapping rendered sub-expressions (group keys, aggregate calls,
    output names) to values. SQL three-valued logic: NULL is None."""
    text = render(node)
    if text in keys:
        return lambda env: env[text]
    if isinstance(node, exp.Paren | exp.Alias):
        return compile_expr(node.this, keys, params)
    leaf = _compile_leaf(node, params)
    if leaf is not None:
        return leaf
    sub = [compile_expr(c, keys, params) for c in node.iter_expressions()] if not isinstance(
        node, exp.Column) else []
    fn = _compile_operator(node, sub, keys, params) or _compile_function(node, sub, keys, params)
    if fn is not None:
        return fn
    raise BadTemplate(f"cannot evaluate {text!r} after aggregation (columns must be group keys, "
                      "functions must be aggregates or simple arithmetic)")


_Fn = Callable[[Mapping], Any]

_BINARY = {
    exp.EQ: lambda a, b: a == b, exp.NEQ: lambda a, b: a != b, exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b, exp.LT: lambda a, b: a < b, exp.LTE: lambda a, b: a <= b,
    exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b, exp.Mul: lambda a, b: a * b,
    exp.Div: lambda a, b: _div(a, b), exp.Mod: lambda a, b: math.fmod(a, b) if b else None,
}


def _compile_leaf(node, params: Mapping[str, Any] | None) -> _Fn | None:
    """A literal, boolean, NULL or bound parameter; None for anything else."""
    if isinstance(node, exp.Literal):
        value = node.this if node.is_string else _number(node.this)
        return lambda env: value
    if isinstance(node, exp.Boolean):
        value = bool(node.this)
        return lambda env: value
    if isinstance(node, exp.Null):
        return lambda env: None
    if isinstance(node, exp.Placeholder):
        name = node.name
        if params is None or name not in params:
            raise BadTemplate(f"parameter :{name} used after aggregation has no bound value")
        value = to_py(params[name])
        return lambda env: value
    return None


def _compile_operator(node, sub: list[_Fn], keys: set[str], params: Mapping[str, Any] | None) -> _Fn | None:
    """Logic, comparison and arithmetic operators; None for anything else."""
    if isinstance(node, exp.Neg):
        return lambda env: _null1(sub[0](env), lambda a: -a)
    if isinstance(node, exp.Not):
        return lambda env: _null1(sub[0](env), lambda a: not a)
    if isinstance(node, exp.And):
        return lambda env: _and3(f(env) for f in sub)
    if isinstance(node, exp.Or):
        return lambda env: _or3(f(env) for f in sub)
    fn = _BINARY.get(type(node))
    if fn is not None:
        left, right = compile_expr(node.this, keys, params), compile_expr(node.expression, keys, params)
        return lambda env: _null2(left(env), right(env), fn)
    if isinstance(node, exp.Is):
        inner = compile_expr(node.this, keys, params)
        return lambda env: inner(env) is None
    if isinstance(node, exp.Between):
        x, lo, hi = (compile_expr(node.args[k], keys, params) for k in ("this", "low", "high"))
        return lambda env: _and3([_null2(x(env), lo(env), lambda a, b: a >= b),
                                  _null2(x(env), hi(env), lambda a, b: a <= b)])
    if isinstance(node, exp.In) and node.expressions:
        x = compile_expr(node.this, keys, params)
        opts = [compile_expr(o, keys, params) for o in node.expressions]
        return lambda env: _or3(_null2(x(env), o(env), lambda a, b: a == b) for o in opts)
    return None


def _compile_function(node, sub: list[_Fn], keys: set[str], params: Mapping[str, Any] | None) -> _Fn | None:
    """The scalar functions allowed after aggregation; None for anything else."""
    if isinstance(node, exp.Abs):
        return lambda env: _null1(sub[0](env), abs)
    if isinstance(node, exp.Sqrt):
        return lambda env: _null1(sub[0](env), math.sqrt)
    if isinstance(node, exp.Coalesce):
        return lambda env: next((v for v in (f(env) for f in sub) if v is not None), None)
    if isinstance(node, exp.Round):
        digits = node.args.get("decimals")
        nd = compile_expr(digits, keys, params) if digits is not None else (lambda env: 0)
        x = compile_expr(node.this, keys, params)
        return lambda env: _null2(x(env), nd(env), lambda a, d: round(a, int(d)))
    if isinstance(node, exp.Cast):
        x = compile_expr(node.this, keys, params)
        to = node.to.this.name.lower() if hasattr(node.to.this, "name") else str(node.to.this).lower()
        conv = int if "int" in to else float if any(t in to for t in ("double", "float", "real", "decimal")) \
            else str if "text" in to or "char" in to else None
        if conv is None:
            raise BadTemplate(f"cannot apply {render(node)} after aggregation")
        return lambda env: _null1(x(env), conv)
    return None


def _div(a, b):
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # PostgreSQL integer division truncates toward zero
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _null1(a, fn):
    return None if a is None else fn(a)


def _null2(a, b, fn):
    return None if a is None or b is None else fn(a, b)


def _and3(values) -> bool | None:
    seen_null = False
    for v in values:
        if v is None:
            seen_null = True
        elif not v:
            return False
    return None if seen_null else True


def _or3(values) -> bool | None:
    seen_null = False
    for v in values:
        if v is None:
            seen_null = True
        elif v:
            return True
    return None if seen_null else False


def _cmp_values(a: Any, b: Any, desc: bool, nulls_first: bool) -> int:
    if a is None or b is None:
        if a is None and b is None:
            return 0
        return (-1 if a is None else 1) * (1 if nulls_first else -1)
    c = (a > b) - (a < b)
    return -c if desc else c


class PostOps:
    """HAVING-free ORDER BY / LIMIT / OFFSET / DISTINCT over keyed rows."""

    def __init__(self, spec: SplitQuery, order_fns: list[Callable[[Mapping], Any]]) -> None:
        self.spec, self.order_fns = spec, order_fns

    def finish(self, items: list[tuple[str, Row, Mapping]]) -> list[tuple[str, Row]]:
        spec = self.spec
        if spec.order:
            keyed = [(key, row, [f(env) for f in self.order_fns]) for key, row, env in items]

            def cmp(x, y) -> int:
                for k, a, b in zip(spec.order, x[2], y[2], strict=True):
                    c = _cmp_values(a, b, k.desc, k.nulls_first)
                    if c:
                        return c
                return (x[0] > y[0]) - (x[0] < y[0])

            keyed.sort(key=functools.cmp_to_key(cmp))
            items = [(k, r, {}) for k, r, _ in keyed]
        out = [(k, r) for k, r, _ in items]
        if spec.distinct:
            seen: set[str] = set()
            unique = []
            for k, r in out:
                sig = group_key(r.values())
                if sig not in seen:
                    seen.add(sig)
                    unique.append((k, r))
            out = unique
        end = None if spec.limit is None else spec.offset + spec.limit
        return out[spec.offset:end]
