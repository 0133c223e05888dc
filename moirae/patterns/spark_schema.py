"""The Spark shape of a live pattern's matches (T 4; docs/ARCHITECTURE.md, 3.8).

A pattern event-query emits one row per match: ``eid``, the event time (the match's last
row), the PARTITION BY columns, then one column per MEASURES alias, and the provenance of
the match as two arrays (the bound rows' source ids, and their times in microseconds,
which the operator makes timestamps in Spark). The measures' Spark types
are inferred from their expressions over the source's schema:

- a column, ``PREV``, ``FIRST``/``LAST``/``MIN``/``MAX`` of a column: that column's type;
- ``COUNT``, ``MATCH_NUMBER()``: ``bigint``; ``CLASSIFIER()``: ``string``;
- ``AVG``, ``SUM``, arithmetic and numeric functions: ``double``;
- comparisons, ``AND``/``OR``/``NOT``, ``IS NULL``, ``IN``, ``BETWEEN``: ``boolean``;
- ``CASE``, ``COALESCE``, ``LEAST``, ``GREATEST``: the type of their first result.

>>> from moirae.patterns import compile_pattern
>>> cp = compile_pattern("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
...     "MEASURES COUNT(A.*) AS n, AVG(A.x) AS ax, LAST(A.ts) AS t, CLASSIFIER() AS c "
...     "PATTERN (A+) WITHIN INTERVAL '1' MINUTE DEFINE A AS x > 1)", name="p", columns=["k", "ts", "x"])
>>> measure_types(cp, {"k": "string", "ts": "timestamp", "x": "int"})
{'n': 'bigint', 'ax': 'double', 't': 'timestamp', 'c': 'string'}
"""

from __future__ import annotations

from collections.abc import Mapping

from moirae.patterns.compile import CompiledPattern
from moirae.patterns.errors import PatternSyntaxError
from moirae.patterns.expr import Col, Expr, Lit, Op, Prev, Ref, Special

#: the output's provenance arrays (zipped into Ananke's PROV column after the operator)
PROV_IDS, PROV_TS = "moirae_pat_prov_ids", "moirae_pat_prov_ts"
#: the input's row id (a source id: the tie-break of equal event times, and the provenance)
ROW_ID = "moirae_pat_rid"

_BOOL_OPS = {"AND", "OR", "NOT", "ISNULL", "IN", "BETWEEN", "=", "<>", "!=", "<", "<=", ">", ">="}
_FIRST_ARG = {"CASE", "COALESCE", "LEAST", "GREATEST"}


def _type_of(e: Expr, columns: Mapping[str, str]) -> str:
    if isinstance(e, Lit):
        v = e.value
        return ("boolean" if isinstance(v, bool) else "bigint" if isinstance(v, int)
                else "double" if isinstance(v, float) else "string")
    if isinstance(e, Col | Prev):
        return columns.get(e.name, "string")
    if isinstance(e, Ref):
        if e.kind == "COUNT":
            return "bigint"
        if e.kind in ("AVG", "SUM"):
            return "double"
        return columns.get(e.name or "", "string")
    if isinstance(e, Special):
        return "bigint" if e.kind.upper() == "MATCH_NUMBER" else "string"
    if isinstance(e, Op):
        op = e.op.upper()
        if op in _BOOL_OPS:
            return "boolean"
        if op in _FIRST_ARG and e.args:
            # CASE's arguments are (cond, value, ..., [else]): its first result is args[1]
            first = e.args[1] if op == "CASE" and len(e.args) > 1 else e.args[0]
            return _type_of(first, columns)
        return "double"
    return "string"


def measure_types(cp: CompiledPattern, columns: Mapping[str, str]) -> dict[str, str]:
    """Each measure's Spark type (a simple type string), from the source's ``columns``."""
    return {name: _type_of(e, columns) for name, e in cp.statement.measures}


def output_ddl(cp: CompiledPattern, columns: Mapping[str, str], eid: str, ts: str) -> str:
    """The operator's output schema as a Spark DDL string (see the module docstring)."""
    fields = [(eid, "string"), (ts, "timestamp")]
    fields += [(k, columns[k]) for k in cp.partition_by]
    fields += [(m, t) for m, t in measure_types(cp, columns).items() if m not in {eid, ts, *cp.partition_by}]
    fields += [(PROV_IDS, "array<bigint>"), (PROV_TS, "array<bigint>")]
    return ", ".join(f"`{n}` {t}" for n, t in fields)


def set_output_ddl(cps, columns: Mapping[str, str], eid: str, ts: str, tag: str) -> str:
    """The output schema of several patterns in one operator: :func:`output_ddl`'s, with
    ``tag`` (the pattern's name) after the event time and the union of the patterns'
    measures; a measure two patterns give different types is refused."""
    head = cps[0]
    seen: dict[str, tuple[str, str]] = {}
    for cp in cps:
        for m, t in measure_types(cp, columns).items():
            if m in {eid, ts, tag, *cp.partition_by}:
                if m == tag:
                    raise PatternSyntaxError(f"pattern {cp.name!r}: measure {m!r} is the column naming the pattern")
                continue
            if m in seen and seen[m][0] != t:
                raise PatternSyntaxError(f"pattern {cp.name!r}: measure {m!r} is {t}, but {seen[m][0]} in pattern "
                                         f"{seen[m][1]!r} (patterns in one operator share their measures' columns)")
            seen.setdefault(m, (t, cp.name))
    if tag in head.partition_by or tag in (eid, ts):
        raise PatternSyntaxError(f"pattern {head.name!r}: the column naming the pattern, {tag!r}, is taken")
    fields = [(eid, "string"), (ts, "timestamp"), (tag, "string")]
    fields += [(k, columns[k]) for k in head.partition_by]
    fields += [(m, t) for m, (t, _) in seen.items()]
    fields += [(PROV_IDS, "array<bigint>"), (PROV_TS, "array<bigint>")]
    return ", ".join(f"`{n}` {t}" for n, t in fields)


def simple_types(schema) -> dict[str, str]:
    """A Spark StructType as column name -> ``simpleString`` type."""
    return {f.name: f.dataType.simpleString() for f in schema.fields}
