"""DEFINE and MEASURES expressions: their syntax tree and parser (docs/PATTERNS.md).

An expression reads the current row (``speed``), earlier rows of the key (``PREV(speed, 2)``)
and rows already bound to a symbol (``A.speed``, ``FIRST(A.speed)``, ``AVG(A.speed)``,
``COUNT(A.*)``). :func:`row_local` tells whether an expression needs only the current row
and PREV: those compile into the vectorized minterm step (T 3, symbolic automata over
predicates), the others are evaluated per live run.

>>> from moirae.patterns.tokens import Cursor
>>> e = parse_expr(Cursor("speed > 2 * PREV(speed) AND A.speed < 5", "p"))
>>> sorted(columns_of(e)), row_local(e), sorted(symbols_of(e))
(['speed'], False, ['A'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moirae.patterns.errors import UndefinedSymbol
from moirae.patterns.lexer import Token
from moirae.patterns.tokens import Cursor

AGGREGATES = ("FIRST", "LAST", "AVG", "SUM", "MIN", "MAX", "COUNT")
FUNCTIONS = {"ABS": 1, "SQRT": 1, "LN": 1, "EXP": 1, "FLOOR": 1, "CEIL": 1, "CEILING": 1,
             "ROUND": -1, "LEAST": -1, "GREATEST": -1, "COALESCE": -1, "POWER": 2, "MOD": 2}
_RESERVED = {"AND", "OR", "NOT", "IS", "NULL", "TRUE", "FALSE", "IN", "BETWEEN", "CASE", "WHEN",
             "THEN", "ELSE", "END", "AS"}


@dataclass(frozen=True)
class Expr:
    """Base of the syntax tree; ``tok`` is where the expression starts (for errors)."""

    tok: Token = field(compare=False, repr=False)


@dataclass(frozen=True)
class Lit(Expr):
    value: object = None


@dataclass(frozen=True)
class Col(Expr):
    """A column of the current row (in MEASURES: of the match's last row)."""

    name: str = ""


@dataclass(frozen=True)
class Prev(Expr):
    """The column ``n`` rows before the current row in the key's stream; NULL before the first."""

    name: str = ""
    n: int = 1


@dataclass(frozen=True)
class Ref(Expr):
    """``kind`` (FIRST, LAST, AVG, SUM, MIN, MAX, COUNT) over the rows bound to ``symbol``.

    ``name`` is None for ``COUNT(A.*)``; ``n`` is the offset of FIRST/LAST (``LAST(A.x, 1)``
    is the row bound before the last).
    """

    kind: str = "LAST"
    symbol: str = ""
    name: str | None = None
    n: int = 0


@dataclass(frozen=True)
class Special(Expr):
    """``MATCH_NUMBER()`` or ``CLASSIFIER()`` (MEASURES only)."""

    kind: str = ""


@dataclass(frozen=True)
class Op(Expr):
    """An operator or function over ``args``: ``op`` is '+', 'AND', 'NOT', 'NEG', 'ISNULL',
    'IN', 'BETWEEN', 'CASE', a comparison or a function name."""

    op: str = ""
    args: tuple[Expr, ...] = ()


_CMP = ("=", "<>", "!=", "<", "<=", ">", ">=")


def parse_expr(c: Cursor) -> Expr:
    """Parse one expression at the cursor (stops before ',', ')', AS, a keyword it cannot use)."""
    return _or(c)


def _or(c: Cursor) -> Expr:
    left = _and(c)
    while (t := c.accept_word("OR")) is not None:
        left = Op(t, "OR", (left, _and(c)))
    return left


def _and(c: Cursor) -> Expr:
    left = _not(c)
    while (t := c.accept_word("AND")) is not None:
        left = Op(t, "AND", (left, _not(c)))
    return left


def _not(c: Cursor) -> Expr:
    if (t := c.accept_word("NOT")) is not None:
        return Op(t, "NOT", (_not(c),))
    return _cmp(c)


def _cmp(c: Cursor) -> Expr:
    left = _add(c)
    t = c.tok
    if t.kind == "op" and t.text in _CMP:
        c.next()
        op = "<>" if t.text == "!=" else t.text
        return Op(t, op, (left, _add(c)))
    if t.is_word("IS"):
        c.next()
        neg = c.accept_word("NOT") is not None
        c.expect_word("NULL")
        e: Expr = Op(t, "ISNULL", (left,))
        return Op(t, "NOT", (e,)) if neg else e
    neg_tok = c.accept_word("NOT")
    if c.tok.is_word("IN"):
        c.next()
        c.expect_op("(")
        items = [_add(c)]
        while c.accept_op(","):
            items.append(_add(c))
        c.expect_op(")")
        e = Op(t, "IN", (left, *items))
    elif c.tok.is_word("BETWEEN"):
        c.next()
        lo = _add(c)
        c.expect_word("AND")
        e = Op(t, "BETWEEN", (left, lo, _add(c)))
    elif neg_tok is not None:
        raise c.fail("expected IN or BETWEEN after NOT")
    else:
        return left
    return Op(t, "NOT", (e,)) if neg_tok is not None else e


def _add(c: Cursor) -> Expr:
    left = _mul(c)
    while (t := c.accept_op("+", "-", "||")) is not None:
        left = Op(t, t.text, (left, _mul(c)))
    return left


def _mul(c: Cursor) -> Expr:
    left = _unary(c)
    while (t := c.accept_op("*", "/", "%")) is not None:
        left = Op(t, t.text, (left, _unary(c)))
    return left


def _unary(c: Cursor) -> Expr:
    if (t := c.accept_op("-")) is not None:
        return Op(t, "NEG", (_unary(c),))
    if c.accept_op("+") is not None:
        return _unary(c)
    return _primary(c)


def _primary(c: Cursor) -> Expr:
    t = c.tok
    if t.kind in ("number", "string"):
        c.next()
        return Lit(t, t.value)
    if t.is_op("("):
        c.next()
        e = parse_expr(c)
        c.expect_op(")")
        return e
    if t.is_word("TRUE", "FALSE", "NULL"):
        c.next()
        return Lit(t, {"TRUE": True, "FALSE": False, "NULL": None}[t.text.upper()])
    if t.is_word("CASE"):
        return _case(c)
    if t.kind == "qident" or (t.kind == "ident" and t.text.upper() not in _RESERVED):
        c.next()
        if c.tok.is_op("(") and t.kind == "ident":
            return _call(c, t)
        if c.accept_op("."):
            col = c.ident("a column after the symbol")
            return Ref(t, "LAST", t.text.upper(), col.text, 0)
        return Col(t, t.text)
    raise c.fail(f"expected an expression, found {'end of text' if t.kind == 'end' else repr(t.text)}")


def _case(c: Cursor) -> Expr:
    t = c.next()
    args: list[Expr] = []
    while c.accept_word("WHEN"):
        args.append(parse_expr(c))
        c.expect_word("THEN")
        args.append(parse_expr(c))
    if not args:
        raise c.fail("expected WHEN")
    args.append(parse_expr(c) if c.accept_word("ELSE") else Lit(t, None))
    c.expect_word("END")
    return Op(t, "CASE", tuple(args))


def _call(c: Cursor, t: Token) -> Expr:
    name = t.text.upper()
    c.expect_op("(")
    if name in ("MATCH_NUMBER", "CLASSIFIER"):
        c.expect_op(")")
        return Special(t, name)
    if name == "PREV":
        col = c.ident("a column")
        if c.tok.is_op("."):
            raise c.fail("PREV takes a column of the current row, not a symbol's")
        n = c.integer("a row offset") if c.accept_op(",") else 1
        c.expect_op(")")
        if n < 1:
            raise c.fail("PREV offset must be at least 1", t)
        return Prev(t, col.text, n)
    if name in AGGREGATES:
        return _aggregate(c, t, name)
    arity = FUNCTIONS.get(name)
    if arity is None:
        raise c.fail(f"unknown function {t.text}", t)
    args = [parse_expr(c)]
    while c.accept_op(","):
        args.append(parse_expr(c))
    c.expect_op(")")
    if arity >= 0 and len(args) != arity:
        raise c.fail(f"{name} takes {arity} argument(s), got {len(args)}", t)
    return Op(t, name, tuple(args))


def _aggregate(c: Cursor, t: Token, name: str) -> Expr:
    sym = c.ident("a symbol")
    c.expect_op(".")
    if c.accept_op("*") is not None:
        if name != "COUNT":
            raise c.fail(f"{name}({sym.text}.*) is not defined; only COUNT takes '*'", t)
        col: str | None = None
    else:
        col = c.ident("a column").text
    n = 0
    if name in ("FIRST", "LAST") and c.accept_op(","):
        n = c.integer("a row offset")
    c.expect_op(")")
    return Ref(t, name, sym.text.upper(), col, n)


def walk(e: Expr):
    """Every node of ``e``, depth first."""
    yield e
    if isinstance(e, Op):
        for a in e.args:
            yield from walk(a)


def columns_of(e: Expr) -> set[str]:
    """The source columns ``e`` reads (current row, PREV and bound rows)."""
    return {n.name for n in walk(e) if isinstance(n, (Col, Prev)) or (isinstance(n, Ref) and n.name)}


def symbols_of(e: Expr) -> set[str]:
    """The symbols whose bound rows ``e`` reads."""
    return {n.symbol for n in walk(e) if isinstance(n, Ref)}


def row_local(e: Expr) -> bool:
    """Whether ``e`` needs only the current row and PREV (so it can be evaluated vectorized)."""
    return not any(isinstance(n, (Ref, Special)) for n in walk(e))


def max_prev(e: Expr) -> int:
    """The largest PREV offset in ``e`` (0 if none)."""
    return max((n.n for n in walk(e) if isinstance(n, Prev)), default=0)


def check_symbols(e: Expr, defined: set[str], c: Cursor) -> None:
    """Raise :class:`UndefinedSymbol` at the first reference to a symbol not in ``defined``."""
    for n in walk(e):
        if isinstance(n, Ref) and n.symbol not in defined:
            raise c.fail(f"symbol {n.symbol} used but not defined", n.tok, UndefinedSymbol)


__all__ = ["AGGREGATES", "Col", "Expr", "Lit", "Op", "Prev", "Ref", "Special", "check_symbols",
           "columns_of", "max_prev", "parse_expr", "row_local", "symbols_of", "walk"]
