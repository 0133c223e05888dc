"""PATTERN: the symbolic regular expression and its parser (T 3, Def. 3.2; docs/PATTERNS.md).

Concatenation, ``|``, grouping and the quantifiers ``* + ? {n} {n,} {n,m} {,m}`` (each
with a reluctant ``?`` form) are SQL:2016's; ``ANY`` is the paper's ⊤, ``NOT(R)`` its
complement ``!R`` and ``SKIP_TILL_ANY(R1, ..)`` / ``SKIP_TILL_NEXT(R1, ..)`` its selection
policies ``#(..)`` / ``@(..)`` (also accepted in that spelling), desugared here exactly as
Def. 3.2 defines them.

>>> from moirae.patterns.tokens import Cursor
>>> show(parse_pattern(Cursor("A{2,} (B | C)? SKIP_TILL_NEXT(D, E)", "p")))
'A{2,} (B|C)? D NOT(ANY* E ANY*) E'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moirae.patterns.lexer import Token
from moirae.patterns.tokens import Cursor


@dataclass(frozen=True)
class Node:
    tok: Token = field(compare=False, repr=False)


@dataclass(frozen=True)
class Sym(Node):
    name: str = ""


@dataclass(frozen=True)
class AnyRow(Node):
    """⊤: any row, bound to no symbol."""


@dataclass(frozen=True)
class Seq(Node):
    items: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Alt(Node):
    branches: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Quant(Node):
    """``body`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded); greedy or reluctant."""

    body: Node | None = None
    lo: int = 0
    hi: int | None = None
    greedy: bool = True


@dataclass(frozen=True)
class Not(Node):
    """Any run of rows (possibly none) that ``body`` does not match (T 3, Def. 3.2 ``!R``)."""

    body: Node | None = None


_CLAUSES = ("WITHIN", "DEFINE", "MEASURES", "PATTERN", "AFTER", "ONE", "ALL", "PARTITION", "ORDER")
_POLICY = {"SKIP_TILL_ANY": "#", "SKIP_TILL_NEXT": "@"}


def parse_pattern(c: Cursor) -> Node:
    """Parse the text between PATTERN's parentheses (stops before the closing one)."""
    return _alt(c)


def _alt(c: Cursor) -> Node:
    t = c.tok
    branches = [_seq(c)]
    while c.accept_op("|"):
        branches.append(_seq(c))
    return branches[0] if len(branches) == 1 else Alt(t, tuple(branches))


def _seq(c: Cursor) -> Node:
    t = c.tok
    items: list[Node] = []
    while not (c.tok.is_op(")", "|", ",") or c.tok.kind == "end" or c.tok.is_word(*_CLAUSES)):
        items.append(_item(c))
    if not items:
        raise c.fail("expected a pattern symbol or '('")
    return items[0] if len(items) == 1 else Seq(t, tuple(items))


def _item(c: Cursor) -> Node:
    node = _atom(c)
    while True:
        t = c.tok
        if t.is_op("*", "+", "?"):
            c.next()
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[t.text]
        elif t.is_op("{"):
            c.next()
            lo = c.integer("a repetition count") if c.tok.kind == "number" else 0
            hi = lo
            if c.accept_op(","):
                hi = c.integer("a repetition count") if c.tok.kind == "number" else None
            c.expect_op("}")
            if hi is not None and (hi < lo or hi == 0):
                raise c.fail(f"bad repetition {{{lo},{hi}}}", t)
        else:
            return node
        greedy = c.accept_op("?") is None
        node = Quant(t, node, lo, hi, greedy)


def _atom(c: Cursor) -> Node:
    t = c.tok
    if t.is_op("("):
        c.next()
        node = _alt(c)
        c.expect_op(")")
        return node
    if t.is_op("#", "@") or t.is_word(*_POLICY):
        c.next()
        return _policy(c, t, _POLICY.get(t.text.upper(), t.text))
    if t.is_op("!") or (t.is_word("NOT") and c.peek().is_op("(")):
        c.next()
        c.expect_op("(")
        body = _alt(c)
        c.expect_op(")")
        return Not(t, body)
    if t.is_word("ANY"):
        c.next()
        return AnyRow(t)
    if t.kind in ("ident", "qident"):
        c.next()
        return Sym(t, t.text.upper() if t.kind == "ident" else t.text)
    raise c.fail(f"expected a pattern symbol or '(', found {'end of text' if t.kind == 'end' else repr(t.text)}")


def _policy(c: Cursor, t: Token, kind: str) -> Node:
    c.expect_op("(")
    parts = [_alt(c)]
    while c.accept_op(","):
        parts.append(_alt(c))
    c.expect_op(")")
    if len(parts) < 2:
        raise c.fail("a selection policy takes at least two sub-patterns", t)
    star = Quant(t, AnyRow(t), 0, None, True)
    items: list[Node] = [parts[0]]
    for p in parts[1:]:
        if kind == "#":
            items += [star, p]
        else:
            items += [Not(t, Seq(t, (star, p, star))), p]
    return Seq(t, tuple(items))


def children(n: Node) -> tuple[Node, ...]:
    if isinstance(n, Seq):
        return n.items
    if isinstance(n, Alt):
        return n.branches
    if isinstance(n, (Quant, Not)):
        assert n.body is not None
        return (n.body,)
    return ()


def nodes(n: Node):
    """Every node of ``n``, depth first."""
    yield n
    for ch in children(n):
        yield from nodes(ch)


def nullable(n: Node) -> bool:
    """Whether ``n`` matches the empty sequence of rows."""
    if isinstance(n, (Sym, AnyRow)):
        return False
    if isinstance(n, Seq):
        return all(nullable(i) for i in n.items)
    if isinstance(n, Alt):
        return any(nullable(b) for b in n.branches)
    if isinstance(n, Quant):
        assert n.body is not None
        return n.lo == 0 or nullable(n.body)
    assert isinstance(n, Not) and n.body is not None
    return not nullable(n.body)


def bounded(n: Node) -> bool:
    """Whether every match of ``n`` has a bounded number of rows (no ``*``, ``+``, ``{n,}``, NOT)."""
    if isinstance(n, Not):
        return False
    if isinstance(n, Quant) and n.hi is None:
        return False
    return all(bounded(ch) for ch in children(n))


def show(n: Node) -> str:
    """The pattern as text (desugared), for messages and docs."""
    if isinstance(n, Sym):
        return n.name
    if isinstance(n, AnyRow):
        return "ANY"
    if isinstance(n, Seq):
        return " ".join(show(i) for i in n.items)
    if isinstance(n, Alt):
        return "(" + "|".join(show(b) for b in n.branches) + ")"
    if isinstance(n, Not):
        assert n.body is not None
        return f"NOT({show(n.body)})"
    assert isinstance(n, Quant) and n.body is not None
    inner = show(n.body)
    if not isinstance(n.body, (Sym, AnyRow, Alt)):
        inner = f"({inner})"
    q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((n.lo, n.hi))
    if q is None:
        q = f"{{{n.lo}}}" if n.hi == n.lo else f"{{{n.lo},{'' if n.hi is None else n.hi}}}"
    return inner + q + ("" if n.greedy else "?")


__all__ = ["Alt", "AnyRow", "Node", "Not", "Quant", "Seq", "Sym", "bounded", "children", "nodes",
           "nullable", "parse_pattern", "show"]
