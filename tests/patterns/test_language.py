"""The language's refusals: one line naming the pattern and the position (docs/PATTERNS.md)."""

from __future__ import annotations

import re

import pytest

from moirae.errors import MoiraeError
from moirae.patterns import (
    PatternError,
    PatternSyntaxError,
    UnboundedPattern,
    UndefinedSymbol,
    UnknownPatternColumn,
    compile_pattern,
)

COLUMNS = {"id": "string", "ts": "timestamp", "speed": "double", "status": "string"}


def mr(pattern: str, define: str = "A AS speed > 1, B AS speed < 1", within: str = "WITHIN INTERVAL '10' MINUTE",
       measures: str = "LAST(A.ts) AS t") -> str:
    return (f"SELECT * FROM ais MATCH_RECOGNIZE (\n  PARTITION BY id ORDER BY ts\n  MEASURES {measures}\n"
            f"  PATTERN ({pattern}) {within}\n  DEFINE {define}\n)")


@pytest.mark.parametrize(("text", "error", "where", "words"), [
    (mr("A B C"), UndefinedSymbol, "4:16", "symbol C used but not defined"),
    (mr("A B", define="A AS speed > LAST(C.speed), B AS speed < 1"), UndefinedSymbol, "5:23",
     "symbol C used but not defined"),
    (mr("A+ B", within=""), UnboundedPattern, "4:13", "needs WITHIN"),
    (mr("A{2,} B", within=""), UnboundedPattern, "4:13", "needs WITHIN"),
    (mr("SKIP_TILL_ANY(A, B)", within=""), UnboundedPattern, "4:12", "needs WITHIN"),
    (mr("A B", define="A AS sped > 1, B AS speed < 1"), UnknownPatternColumn, "5:15", "column 'sped'"),
    (mr("A B", measures="AVG(A.knots) AS k"), UnknownPatternColumn, "3:12", "column 'knots'"),
    (mr("A (B"), PatternSyntaxError, "4:18", "expected ')'"),
    (mr("A B{3,1}"), PatternSyntaxError, "4:15", "bad repetition"),
    (mr("A*"), PatternSyntaxError, "4:3", "can match no rows"),
    (mr("A (B?)+"), PatternSyntaxError, "4:18", "can match no rows"),
    (mr("A B", define="A AS speed >> 1, B AS speed < 1"), PatternSyntaxError, "5:22", "expected an expression"),
    (mr("A NOT(B)", define="A AS speed > 1, B AS speed < A.speed"), PatternSyntaxError, "4:18", "row-local"),
    (mr("A B", define="A AS MATCH_NUMBER() > 1, B AS speed < 1"), PatternSyntaxError, "5:15", "MEASURES only"),
    ("SELECT * FROM ais MATCH_RECOGNIZE (ORDER BY ts ALL ROWS PER MATCH PATTERN (A) DEFINE A AS TRUE)",
     PatternSyntaxError, "1:48", "ALL ROWS PER MATCH"),
    ("SELECT * FROM ais MATCH_RECOGNIZE (PARTITION BY vessel ORDER BY ts PATTERN (A) DEFINE A AS TRUE)",
     UnknownPatternColumn, "1:49", "column 'vessel'"),
])
def test_refusals_name_the_pattern_and_the_position(text, error, where, words):
    with pytest.raises(error) as got:
        compile_pattern(text, name="anchored", columns=COLUMNS)
    msg = str(got.value)
    assert "\n" not in msg
    assert msg.startswith(f"pattern 'anchored' at {where}: "), msg
    assert words in msg
    assert isinstance(got.value, PatternError) and isinstance(got.value, ValueError)
    assert isinstance(got.value, MoiraeError)


def test_a_valid_pattern_reports_its_shape():
    cp = compile_pattern(mr("A{3,}? SKIP_TILL_NEXT(B, A) | #(B, A)", measures="AVG(A.speed) AS v, MATCH_NUMBER() AS m"),
                         name="p", columns=COLUMNS)
    assert cp.partition_by == ("id",) and cp.order_by == "ts" and cp.within_ns == 600 * 10**9
    assert cp.measure_names == ("v", "m") and cp.deterministic and cp.symbols == ("A", "B")
    dep = compile_pattern(mr("A+ B", define="A AS speed > 1, B AS speed < FIRST(A.speed) / 2"), name="p")
    assert not dep.deterministic


@pytest.mark.parametrize("within", ["WITHIN INTERVAL '90' SECOND", "WITHIN '90 seconds'", "WITHIN 90",
                                    "WITHIN INTERVAL '1.5' MINUTES"])
def test_within_spellings(within):
    assert compile_pattern(mr("A+ B", within=within), name="p").within_ns == 90 * 10**9


def test_errors_are_reexported_from_the_index():
    import moirae.errors as index
    for name in ("PatternError", "PatternSyntaxError", "UndefinedSymbol", "UnboundedPattern",
                 "UnknownPatternColumn", "PatternStateError", "PredicateEvaluationError"):
        assert re.fullmatch(r"\w+", name) and getattr(index, name).__module__ == "moirae.patterns.errors"


def test_the_reference_docs_example_compiles():
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "PATTERNS.md").read_text()
    sql = re.search(r"```sql\n(.*?)```", doc, re.S).group(1)
    cp = compile_pattern(sql, name="overheat", columns=["machine", "ts", "row_id", "temp", "status"])
    assert cp.symbols == ("H", "R", "D") and cp.measure_names == ("since", "peak", "after_drop", "highs", "n")
