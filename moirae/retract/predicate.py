"""A retraction predicate: one safe boolean condition over one archived stream.

``sensor = 'X' AND ts >= '2026-01-01 10:00' AND ts < '2026-01-01 10:20'`` is the
shape: a WHERE condition an operator types to name bad rows. :func:`check_predicate`
parses it with sqlglot (PostgreSQL dialect) and refuses, with one line saying why,
anything but a single boolean expression built from the stream's own columns,
literals, comparisons, ``AND`` / ``OR`` / ``NOT``, ``IN`` lists, ``BETWEEN``,
``IS [NOT] NULL``, ``LIKE``, arithmetic and a short list of pure functions: no
subquery, no statement, no other table, no unknown column, no other function. The
answer is the condition rendered again by sqlglot (so what runs is what was checked),
ready to follow ``WHERE`` in a read of the stream's table.

>>> check_predicate("host = 'a' and cpu > 90", {"host", "cpu"}, "ts")
"host = 'a' AND cpu > 90"
>>> check_predicate("cpu > (select 1)", {"cpu"}, "ts")
Traceback (most recent call last):
...
moirae.retract.errors.BadPredicate: retraction predicate: a subquery is not allowed ((SELECT 1))
"""

from __future__ import annotations

from collections.abc import Collection

import sqlglot
from sqlglot import exp

from moirae.retract.errors import BadPredicate

#: functions a predicate may call: pure, cheap, no side effects
SAFE_FUNCTIONS = frozenset({"abs", "lower", "upper", "length", "coalesce", "round", "floor", "ceil",
                            "trim", "substring", "greatest", "least", "date_trunc", "nullif"})
#: the expression nodes a predicate may hold besides columns, literals and safe functions
_ALLOWED = (exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Neg, exp.Not,
            exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In,
            exp.Between, exp.Like, exp.ILike, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Cast,
            exp.DataType, exp.Tuple, exp.Interval, exp.Var, exp.NullSafeEQ, exp.NullSafeNEQ)
_BOOLEAN = (exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In,
            exp.Between, exp.Like, exp.ILike, exp.Boolean, exp.NullSafeEQ, exp.NullSafeNEQ)
MAX_LENGTH = 4000


def _fail(why: str) -> BadPredicate:
    return BadPredicate(f"retraction predicate: {why}")


def check_predicate(sql: str, columns: Collection[str], ts_col: str) -> str:
    """The condition ``sql`` as it will run, or :class:`BadPredicate` saying why not.

    ``columns`` are the stream's payload columns; ``ts_col`` its event-time column
    (also allowed). Column names compare as PostgreSQL folds them (lower case unless
    quoted)."""
    if not isinstance(sql, str) or not sql.strip():
        raise _fail("empty")
    if len(sql) > MAX_LENGTH:
        raise _fail(f"longer than {MAX_LENGTH} characters")
    if "\x00" in sql:
        raise _fail("holds a NUL character")
    try:
        statements = sqlglot.parse(sql, read="postgres")
    except sqlglot.errors.ParseError as exc:
        raise _fail(f"does not parse: {str(exc).splitlines()[0]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise _fail(f"must be one condition, got {len(statements)} statements")
    tree = statements[0]
    if isinstance(tree, exp.Query | exp.Command) or not isinstance(tree, exp.Expression):
        raise _fail(f"must be a condition, not a statement ({tree.sql(dialect='postgres')[:60]})")
    known = {*columns, ts_col}
    for node in tree.walk():
        if isinstance(node, exp.Query | exp.Subquery):
            raise _fail(f"a subquery is not allowed ({node.sql(dialect='postgres')[:60]})")
        if isinstance(node, exp.Column):
            if node.table:
                raise _fail(f"column {node.sql(dialect='postgres')} names a table; name the column only")
            ident = node.this
            name = node.name if getattr(ident, "quoted", False) else node.name.lower()
            if name not in known:
                raise _fail(f"unknown column {node.name!r} (the stream has: {', '.join(sorted(known))})")
            continue
        if isinstance(node, _ALLOWED):
            continue
        if isinstance(node, exp.Func):
            name = (node.sql_name() if not isinstance(node, exp.Anonymous) else node.name).lower()
            if name not in SAFE_FUNCTIONS:
                raise _fail(f"function {name!r} is not allowed (allowed: {', '.join(sorted(SAFE_FUNCTIONS))})")
            continue
        if isinstance(node, exp.Star):
            raise _fail("'*' is not a condition")
        raise _fail(f"{type(node).__name__.lower()} is not allowed ({node.sql(dialect='postgres')[:60]})")
    root = tree.unnest() if isinstance(tree, exp.Paren) else tree
    if not isinstance(root, _BOOLEAN):
        raise _fail(f"is not a boolean condition ({tree.sql(dialect='postgres')[:60]})")
    return tree.sql(dialect="postgres")
