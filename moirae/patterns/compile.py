"""compile_pattern: MATCH_RECOGNIZE text to a checked, compiled pattern (T 3; docs/PATTERNS.md).

Every refusal is one line naming the pattern and the position (``line:column``):

>>> compile_pattern("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B+) DEFINE A AS x > 1)", name="p")
Traceback (most recent call last):
...
moirae.patterns.errors.UndefinedSymbol: pattern 'p' at 1:57: symbol B used but not defined
>>> cp = compile_pattern("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B{2}) "
...                      "DEFINE A AS x > 1, B AS x <= PREV(x))", name="p", columns=["ts", "x"])
>>> cp.symbols, cp.deterministic, cp.max_prev, cp.columns_used
(('A', 'B'), True, 1, ('x',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moirae.patterns.errors import (
    PatternSyntaxError,
    UnboundedPattern,
    UndefinedSymbol,
    UnknownPatternColumn,
    at,
)
from moirae.patterns.expr import Col, Expr, Prev, Ref, Special, max_prev, row_local, symbols_of, walk
from moirae.patterns.nfa import Program
from moirae.patterns.statement import Statement, parse_statement
from moirae.patterns.syntax import Not, Quant, Sym, bounded, nodes, nullable


@dataclass(frozen=True, eq=False)
class CompiledPattern:
    """A pattern ready to run: its symbols, predicates split into row-local (vectorized, one
    bit each in a row's minterm mask) and dependent (evaluated per live run), and its program."""

    name: str
    text: str
    statement: Statement
    symbols: tuple[str, ...]
    local: tuple[tuple[int, Expr], ...]
    dependent: Mapping[int, Expr]
    program: Program
    max_prev: int
    columns_used: tuple[str, ...]
    row_id: str

    @property
    def source(self) -> str:
        return self.statement.source

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.statement.partition_by

    @property
    def order_by(self) -> str:
        return self.statement.order_by

    @property
    def within_ns(self) -> int | None:
        return self.statement.within_ns

    @property
    def skip(self) -> tuple[str, str | None]:
        return self.statement.skip

    @property
    def measure_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.statement.measures)

    @property
    def deterministic(self) -> bool:
        """True when every predicate is row-local, so the matcher walks a DFA (T 3)."""
        return not self.dependent


def compile_pattern(text: str, *, name: str = "pattern",
                    columns: Mapping[str, object] | Sequence[str] | None = None,
                    row_id: str = "row_id") -> CompiledPattern:
    """Parse and check ``text``; ``columns`` (names, or names to types) are the source's, checked
    when given. Raises a :class:`~moirae.patterns.errors.PatternError` subclass, one line."""
    st = parse_statement(text, name)

    def fail(tok, msg, err=PatternSyntaxError):
        return err(at(name, tok.line, tok.col, msg))

    used: list[str] = []
    for n in nodes(st.pattern):
        if isinstance(n, Sym):
            if n.name not in st.defines:
                raise fail(n.tok, f"symbol {n.name} used but not defined", UndefinedSymbol)
            if n.name not in used:
                used.append(n.name)
        if isinstance(n, Quant) and n.body is not None and nullable(n.body):
            raise fail(n.tok, "a quantifier over a sub-pattern that can match no rows")
    if nullable(st.pattern):
        raise fail(st.toks["clause:PATTERN"], "the pattern can match no rows")
    if len(used) > 62:
        raise fail(st.toks["clause:PATTERN"], f"{len(used)} symbols; at most 62")
    if st.within_ns is None and not bounded(st.pattern):
        bad = next(n for n in nodes(st.pattern) if (isinstance(n, Quant) and n.hi is None) or isinstance(n, Not))
        raise fail(bad.tok, "an unbounded pattern (*, +, {n,}, NOT, SKIP_TILL_*) needs WITHIN", UnboundedPattern)
    known = set(used)
    exprs: list[tuple[str, Expr]] = [(f"DEFINE {s}", e) for s, e in st.defines.items() if s in known]
    exprs += [(f"MEASURES {m}", e) for m, e in st.measures]
    for where, e in exprs:
        for node in walk(e):
            if isinstance(node, Ref) and node.symbol not in known:
                raise fail(node.tok, f"symbol {node.symbol} used but not defined", UndefinedSymbol)
            if isinstance(node, Special) and where.startswith("DEFINE"):
                raise fail(node.tok, f"{node.kind}() is allowed in MEASURES only")
    kind, target = st.skip
    if target is not None and target not in known:
        raise fail(st.toks["skip"], f"symbol {target} used but not defined", UndefinedSymbol)
    names = None if columns is None else set(columns)
    read: list[str] = []
    for where, e in exprs:
        for node in walk(e):
            col = node.name if isinstance(node, (Col, Prev, Ref)) else None
            if col is None:
                continue
            if names is not None and col not in names:
                raise fail(node.tok, f"{where}: column {col!r} is not in the source (has {', '.join(sorted(names))})",
                           UnknownPatternColumn)
            if col not in read:
                read.append(col)
    if names is not None:
        for key, tok in st.toks.items():
            if key.startswith(("partition:", "order:")) and tok.text not in names:
                raise fail(tok, f"column {tok.text!r} is not in the source (has {', '.join(sorted(names))})",
                           UnknownPatternColumn)
    if st.select is not None:
        allowed = set(st.partition_by) | {m for m, _ in st.measures}
        for s in st.select:
            if s not in allowed:
                raise fail(st.toks[f"select:{s}"], f"SELECT {s}: not a PARTITION BY column or a measure")
    index = {s: i for i, s in enumerate(used)}
    local = tuple((index[s], st.defines[s]) for s in used if row_local(st.defines[s]))
    dependent = {index[s]: st.defines[s] for s in used if not row_local(st.defines[s])}
    for n in nodes(st.pattern):
        if isinstance(n, Not):
            for m in nodes(n):
                if isinstance(m, Sym) and index[m.name] in dependent:
                    raise fail(m.tok, f"symbol {m.name} reads bound rows ({', '.join(sorted(symbols_of(st.defines[m.name])))}); "
                               "inside NOT or SKIP_TILL_NEXT only row-local symbols are allowed")
    prog = Program(st.pattern, used)
    return CompiledPattern(
        name=name, text=text, statement=st, symbols=tuple(used), local=local, dependent=dependent,
        program=prog, max_prev=max((max_prev(e) for _, e in exprs), default=0),
        columns_used=tuple(read), row_id=row_id)


__all__ = ["CompiledPattern", "compile_pattern"]
