"""The MATCH_RECOGNIZE statement, parsed (SQL:2016 row pattern recognition as Flink SQL,
Oracle and Trino spell it; docs/PATTERNS.md).

>>> s = parse_statement('''SELECT * FROM ais MATCH_RECOGNIZE (PARTITION BY id ORDER BY ts
...     MEASURES LAST(A.ts) AS t PATTERN (A{3,}) WITHIN INTERVAL '10' MINUTE
...     DEFINE A AS speed < 0.5)''', "anchored")
>>> s.source, s.partition_by, s.order_by, s.within_ns, [m[0] for m in s.measures]
('ais', ('id',), 'ts', 600000000000, ['t'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moirae.base.durations import DurationError, parse_duration
from moirae.patterns.expr import Expr, parse_expr
from moirae.patterns.lexer import Token
from moirae.patterns.syntax import Node, parse_pattern
from moirae.patterns.tokens import Cursor

_UNITS = ("SECOND", "SECONDS", "MINUTE", "MINUTES", "HOUR", "HOURS", "DAY", "DAYS",
          "MILLISECOND", "MILLISECONDS")


@dataclass(frozen=True)
class Statement:
    """One parsed MATCH_RECOGNIZE statement; ``toks`` keeps where each name was written."""

    name: str
    source: str
    select: tuple[str, ...] | None
    partition_by: tuple[str, ...]
    order_by: str
    measures: tuple[tuple[str, Expr], ...]
    skip: tuple[str, str | None]
    pattern: Node
    within_ns: int | None
    defines: dict[str, Expr]
    toks: dict[str, Token] = field(default_factory=dict, compare=False, repr=False)


def parse_statement(text: str, name: str) -> Statement:
    """Parse ``SELECT .. FROM src MATCH_RECOGNIZE ( .. )``; errors are one line naming ``name``."""
    c = Cursor(text, name)
    toks: dict[str, Token] = {}
    c.expect_word("SELECT")
    select: list[str] | None = None
    if not c.accept_op("*"):
        select = _names(c, toks, "select", "a column or measure name")
    c.expect_word("FROM")
    source = c.ident("a stream name").text
    c.expect_word("MATCH_RECOGNIZE")
    c.expect_op("(")
    parts: dict[str, object] = {}
    while not c.tok.is_op(")"):
        t = c.tok
        clause = _clause(c, toks)
        if clause[0] in parts:
            raise c.fail(f"{clause[0]} given twice", t)
        parts[clause[0]] = clause[1]
        toks[f"clause:{clause[0]}"] = t
    close = c.expect_op(")")
    if c.accept_word("AS"):
        c.ident("an alias")
    elif c.tok.kind == "ident":
        c.next()
    c.accept_op(";")
    if c.tok.kind != "end":
        raise c.fail(f"unexpected {c.tok.text!r} after MATCH_RECOGNIZE")
    for needed in ("ORDER BY", "PATTERN", "DEFINE"):
        if needed not in parts:
            raise c.fail(f"MATCH_RECOGNIZE needs {needed}", close)
    return Statement(
        name=name, source=source, select=tuple(select) if select is not None else None,
        partition_by=tuple(parts.get("PARTITION BY", ())),  # type: ignore[arg-type]
        order_by=parts["ORDER BY"],  # type: ignore[arg-type]
        measures=tuple(parts.get("MEASURES", ())),  # type: ignore[arg-type]
        skip=parts.get("AFTER MATCH SKIP", ("PAST LAST ROW", None)),  # type: ignore[arg-type]
        pattern=parts["PATTERN"],  # type: ignore[arg-type]
        within_ns=parts.get("WITHIN"),  # type: ignore[arg-type]
        defines=parts["DEFINE"],  # type: ignore[arg-type]
        toks=toks)


def _names(c: Cursor, toks: dict[str, Token], prefix: str, what: str = "a column") -> list[str]:
    out = []
    while True:
        t = c.ident(what)
        toks[f"{prefix}:{t.text}"] = t
        out.append(t.text)
        if not c.accept_op(","):
            return out


def _clause(c: Cursor, toks: dict[str, Token]) -> tuple[str, object]:
    t = c.tok
    if c.accept_word("PARTITION"):
        c.expect_word("BY")
        return "PARTITION BY", tuple(_names(c, toks, "partition"))
    if c.accept_word("ORDER"):
        c.expect_word("BY")
        names = _names(c, toks, "order")
        c.accept_word("ASC")
        if len(names) != 1:
            raise c.fail("ORDER BY takes the one event-time column", t)
        return "ORDER BY", names[0]
    if c.accept_word("MEASURES"):
        measures = []
        while True:
            e = parse_expr(c)
            c.expect_word("AS")
            alias = c.ident("a measure name")
            toks[f"measure:{alias.text}"] = alias
            measures.append((alias.text, e))
            if not c.accept_op(","):
                return "MEASURES", measures
    if c.accept_word("ONE"):
        for w in ("ROW", "PER", "MATCH"):
            c.expect_word(w)
        return "ROWS PER MATCH", "ONE"
    if c.tok.is_word("ALL"):
        raise c.fail("ALL ROWS PER MATCH is not supported; use ONE ROW PER MATCH")
    if c.accept_word("AFTER"):
        c.expect_word("MATCH")
        c.expect_word("SKIP")
        if c.accept_word("PAST"):
            c.expect_word("LAST")
            c.expect_word("ROW")
            return "AFTER MATCH SKIP", ("PAST LAST ROW", None)
        c.expect_word("TO")
        if c.accept_word("NEXT"):
            c.expect_word("ROW")
            return "AFTER MATCH SKIP", ("TO NEXT ROW", None)
        which = c.expect_word("FIRST", "LAST").text.upper()
        s = c.ident("a symbol")
        toks["skip"] = s
        return "AFTER MATCH SKIP", (f"TO {which}", s.text.upper())
    if c.accept_word("PATTERN"):
        c.expect_op("(")
        node = parse_pattern(c)
        c.expect_op(")")
        return "PATTERN", node
    if c.accept_word("WITHIN"):
        return "WITHIN", _within(c)
    if c.accept_word("DEFINE"):
        defines: dict[str, Expr] = {}
        while True:
            s = c.ident("a symbol")
            key = s.text.upper() if s.kind == "ident" else s.text
            if key in defines:
                raise c.fail(f"symbol {key} defined twice", s)
            toks[f"define:{key}"] = s
            c.expect_word("AS")
            defines[key] = parse_expr(c)
            if not c.accept_op(","):
                return "DEFINE", defines
    raise c.fail(f"expected a MATCH_RECOGNIZE clause, found {'end of text' if t.kind == 'end' else repr(t.text)}")


def _within(c: Cursor) -> int:
    t = c.tok
    if c.accept_word("INTERVAL"):
        v = c.tok
        if v.kind not in ("string", "number"):
            raise c.fail("expected the interval's amount, like '10'")
        c.next()
        unit = c.expect_word(*_UNITS).text
        text = f"{v.value} {unit}"
    elif t.kind in ("string", "number"):
        c.next()
        text = str(t.value)
    else:
        raise c.fail("expected INTERVAL '10' MINUTE, '10 minutes' or a number of seconds")
    try:
        d = parse_duration(text, positive=True)
    except DurationError as e:
        raise c.fail(f"WITHIN: {e}", t) from None
    return int(round(d.total_seconds() * 1e9))


__all__ = ["Statement", "parse_statement"]
