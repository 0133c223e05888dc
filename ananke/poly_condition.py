"""An event-query's condition, evaluated in Python from its Spark SQL text (H 6).

The filters after a window aggregate (``avg_bw > 1000``) are recorded, when the plan is
built, as the SQL text Spark's analyzer gives them (``(avg_bw > 1000.0D)``,
:mod:`ananke.poly_spark`). :class:`Condition` compiles that text once into a Python
function of a row (a mapping of column names to values), so a re-evaluated alert is
checked without Spark and without re-running the query.

The grammar covered is what such conditions are made of: column names, numeric, string
and boolean literals (Spark's type suffixes ``D``, ``L``, ``S``, ``Y``, ``BD``, ``F``),
``+ - * / %``, the six comparisons, ``AND`` / ``OR`` / ``NOT`` with SQL's three-valued
logic, ``IS [NOT] NULL``, ``[NOT] IN (..)`` and ``CAST(.. AS <numeric, string or
boolean type>)``. Anything else leaves :attr:`Condition.compiled` False with the reason,
and :meth:`Condition.holds` answers None (not covered: the caller recomputes).

>>> c = Condition("((avg_bw > CAST(1000 AS DOUBLE)) AND (NOT (sid IN ('a', 'b'))))")
>>> c.holds({"avg_bw": 1500.0, "sid": "c"}), c.holds({"avg_bw": 900.0, "sid": "c"}), c.holds({"avg_bw": None, "sid": "c"})
(True, False, False)
>>> Condition("(x > 1.5D)").columns
frozenset({'x'})
>>> Condition("rlike(x, 'a.*')").compiled
False
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?P<suffix>BD|D|L|S|Y|F)?(?![A-Za-z_])
  | (?P<str>'(?:[^'\\]|\\.|'')*')
  | (?P<bq>`(?:[^`]|``)*`)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>>=|<=|<>|!=|==|<=>|[=<>+\-*/%(),])
)""", re.VERBOSE)

_NUMERIC = {"DOUBLE": float, "FLOAT": float, "REAL": float, "INT": int, "INTEGER": int, "BIGINT": int,
            "SMALLINT": int, "TINYINT": int, "STRING": str, "BOOLEAN": bool}

Fn = Callable[[Mapping[str, Any]], Any]


class Uncovered(Exception):
    """A condition outside the grammar :class:`Condition` compiles."""


def _tokens(sql: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(sql):
        if sql[pos:].strip() == "":
            break
        m = _TOKEN.match(sql, pos)
        if m is None or m.end() == pos:
            raise Uncovered(f"cannot read {sql[pos:pos + 20]!r}")
        pos = m.end()
        if m.group("num") is not None:
            text, suffix = m.group("num"), m.group("suffix")
            is_int = re.fullmatch(r"\d+", text) is not None and suffix not in ("D", "F", "BD")
            out.append(("lit", int(text) if is_int else float(text)))
        elif m.group("str") is not None:
            body = m.group("str")[1:-1]
            out.append(("lit", re.sub(r"\\(.)", r"\1", body.replace("''", "'"))))
        elif m.group("bq") is not None:
            out.append(("name", m.group("bq")[1:-1].replace("``", "`")))
        elif m.group("ident") is not None:
            word = m.group("ident")
            out.append(("kw", word.upper()) if word.upper() in _KEYWORDS else ("name", word))
        else:
            out.append(("op", m.group("op")))
    return out


_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "IN", "CAST", "AS", "TRUE", "FALSE"}


def _and(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _cmp(op: str, a, b):
    if a is None or b is None:
        return None
    if op in ("=", "=="):
        return a == b
    if op in ("<>", "!="):
        return a != b
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _arith(op: str, a, b):
    if a is None or b is None:
        return None
    if op in ("/", "%") and b == 0:
        return None  # Spark: division by zero is NULL
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "%": lambda: a % b}[op]()


class _Parser:
    def __init__(self, toks: list[tuple[str, Any]]) -> None:
        self.toks, self.i = toks, 0
        self.columns: set[str] = set()

    def peek(self, kind: str, value: Any = None) -> bool:
        if self.i >= len(self.toks):
            return False
        k, v = self.toks[self.i]
        return k == kind and (value is None or v == value)

    def take(self, kind: str, value: Any = None):
        if not self.peek(kind, value):
            got = self.toks[self.i] if self.i < len(self.toks) else ("end", "")
            raise Uncovered(f"expected {value or kind}, got {got[1]!r}")
        self.i += 1
        return self.toks[self.i - 1][1]

    def expr(self) -> Fn:
        left = self.conj()
        while self.peek("kw", "OR"):
            self.i += 1
            right = self.conj()
            left = (lambda a, b: lambda r: _or(a(r), b(r)))(left, right)
        return left

    def conj(self) -> Fn:
        left = self.neg()
        while self.peek("kw", "AND"):
            self.i += 1
            right = self.neg()
            left = (lambda a, b: lambda r: _and(a(r), b(r)))(left, right)
        return left

    def neg(self) -> Fn:
        if self.peek("kw", "NOT"):
            self.i += 1
            inner = self.neg()
            return lambda r: None if (v := inner(r)) is None else not v
        return self.comparison()

    def comparison(self) -> Fn:
        left = self.additive()
        if self.peek("op") and self.toks[self.i][1] in ("=", "==", "<>", "!=", "<", "<=", ">", ">="):
            op = self.take("op")
            right = self.additive()
            return lambda r: _cmp(op, left(r), right(r))
        if self.peek("kw", "IS"):
            self.i += 1
            negate = self.peek("kw", "NOT")
            self.i += negate
            self.take("kw", "NULL")
            return lambda r: (left(r) is not None) if negate else (left(r) is None)
        negate = self.peek("kw", "NOT") and self.i + 1 < len(self.toks) and self.toks[self.i + 1] == ("kw", "IN")
        if negate or self.peek("kw", "IN"):
            self.i += 1 + negate
            self.take("op", "(")
            items = [self.additive()]
            while self.peek("op", ","):
                self.i += 1
                items.append(self.additive())
            self.take("op", ")")

            def isin(r, left=left, items=items, negate=negate):
                v = left(r)
                if v is None:
                    return None
                vals = [f(r) for f in items]
                hit = v in [x for x in vals if x is not None]
                res = True if hit else (None if any(x is None for x in vals) else False)
                return res if not negate or res is None else not res
            return isin
        return left

    def additive(self) -> Fn:
        left = self.term()
        while self.peek("op") and self.toks[self.i][1] in ("+", "-"):
            op = self.take("op")
            right = self.term()
            left = (lambda a, b, o: lambda r: _arith(o, a(r), b(r)))(left, right, op)
        return left

    def term(self) -> Fn:
        left = self.unary()
        while self.peek("op") and self.toks[self.i][1] in ("*", "/", "%"):
            op = self.take("op")
            right = self.unary()
            left = (lambda a, b, o: lambda r: _arith(o, a(r), b(r)))(left, right, op)
        return left

    def unary(self) -> Fn:
        if self.peek("op", "-"):
            self.i += 1
            inner = self.unary()
            return lambda r: None if (v := inner(r)) is None else -v
        return self.primary()

    def primary(self) -> Fn:
        if self.peek("lit"):
            v = self.take("lit")
            return lambda r: v
        if self.peek("kw", "NULL"):
            self.i += 1
            return lambda r: None
        if self.peek("kw", "TRUE") or self.peek("kw", "FALSE"):
            v = self.take("kw") == "TRUE"
            return lambda r: v
        if self.peek("kw", "CAST"):
            self.i += 1
            self.take("op", "(")
            inner = self.expr()
            self.take("kw", "AS")
            typ = self.take("name").upper()
            if self.peek("op", "("):  # DECIMAL(p, s)
                while not self.peek("op", ")"):
                    self.i += 1
                self.i += 1
            self.take("op", ")")
            conv = float if typ == "DECIMAL" else _NUMERIC.get(typ)
            if conv is None:
                raise Uncovered(f"CAST to {typ}")
            return lambda r: None if (v := inner(r)) is None else conv(v)
        if self.peek("name"):
            name = self.take("name")
            if self.peek("op", "("):
                raise Uncovered(f"the function {name}()")
            self.columns.add(name)

            def col(r, name=name):
                if name not in r:
                    raise Uncovered(f"no column {name!r} in the row")
                v = r[name]
                return None if isinstance(v, float) and v != v else v  # NaN stands for NULL
            return col
        if self.peek("op", "("):
            self.i += 1
            inner = self.expr()
            self.take("op", ")")
            return inner
        got = self.toks[self.i] if self.i < len(self.toks) else ("end", "")
        raise Uncovered(f"unexpected {got[1]!r}")


class Condition:
    """One filter's Spark SQL text, compiled to a Python predicate of a row."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.why = ""
        self._fn: Fn | None = None
        self.columns: frozenset[str] = frozenset()
        try:
            p = _Parser(_tokens(sql))
            fn = p.expr()
            if p.i != len(p.toks):
                raise Uncovered(f"trailing {p.toks[p.i][1]!r}")
            self._fn, self.columns = fn, frozenset(p.columns)
        except Uncovered as exc:
            self.why = f"condition {sql!r}: {exc}"

    @property
    def compiled(self) -> bool:
        return self._fn is not None

    def holds(self, row: Mapping[str, Any]) -> bool | None:
        """True when Spark's filter would keep the row, False when it would drop it (a
        NULL result drops it); None when the condition is not covered."""
        if self._fn is None:
            return None
        try:
            v = self._fn(row)
        except Uncovered:
            return None
        except TypeError:  # e.g. a string compared with a number: Spark would cast; not covered
            return None
        return bool(v) if v is not None else False

    def value(self, row: Mapping[str, Any]) -> Any:
        """The text's value on ``row`` as an expression (an aggregate's argument, such
        as ``(bw * CAST(8 AS DOUBLE))``); raises :class:`Uncovered` when not covered."""
        if self._fn is None:
            raise Uncovered(self.why)
        return self._fn(row)

    def __repr__(self) -> str:
        return f"Condition({self.sql!r})"
