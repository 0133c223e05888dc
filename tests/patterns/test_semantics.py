"""Worked examples of the language's semantics (docs/PATTERNS.md), each checked against both
the compiled matcher and the reference."""

from __future__ import annotations

import pandas as pd

from moirae.patterns import Matcher, compile_pattern, reference_matches


def run(pattern: str, define: str, xs: list, skip: str = "PAST LAST ROW", within: str = "WITHIN 100"):
    text = (f"SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts AFTER MATCH SKIP {skip} "
            f"PATTERN ({pattern}) {within} DEFINE {define})")
    cp = compile_pattern(text, name="ex")
    rows = pd.DataFrame({"ts": [float(i) for i in range(len(xs))], "row_id": range(len(xs)), "x": xs})
    m = Matcher(cp)
    got, st = m.advance(None, rows.iloc[: len(xs) // 2])
    more, st = m.advance(st, rows.iloc[len(xs) // 2:])
    end, _ = m.finish(st)
    out = got + more + end
    assert out == reference_matches(cp, rows)
    return [[rid for rid, _ in mt.rows] for mt in out]


def test_the_issues_example_highs_then_a_drop_with_no_restart_in_between():
    """Three or more readings above 80, then a drop, within 10 s, no restart in between."""
    define = "H AS x > 80, D AS x BETWEEN 0 AND 49, R AS x = -1"
    #        0   1   2   3   4   5   6   7   8   9  10  11  12
    xs = [90, 91, 92, 60, 40, 85, 86, 87, -1, 30, 90, 90, 90]
    assert run("H{3,} NOT(ANY* R ANY*) D", define, xs) == [[0, 1, 2, 4]]
    # without the negation the restart at row 8 is skipped over
    assert run("SKIP_TILL_NEXT(H{3,}, D)", define, xs) == [[0, 1, 2, 4], [5, 6, 7, 9]]


def test_skip_till_next_takes_the_first_and_skip_till_any_the_last_within():
    define = "A AS x = 1, B AS x = 2"
    xs = [1, 0, 2, 0, 2, 0]
    assert run("SKIP_TILL_NEXT(A, B)", define, xs) == [[0, 2]]
    assert run("SKIP_TILL_ANY(A, B)", define, xs) == [[0, 4]]
    assert run("SKIP_TILL_ANY(A, B)", define, xs, within="WITHIN 3") == [[0, 2]]
    assert run("A B", define, xs) == []  # strict contiguity


def test_greedy_and_reluctant_quantifiers_and_skip_modes():
    define = "A AS x = 1"
    xs = [1, 1, 1, 1, 1, 0]
    assert run("A{2,}", define, xs) == [[0, 1, 2, 3, 4]]
    assert run("A{2,}?", define, xs) == [[0, 1], [2, 3]]
    assert run("A{2}", define, xs, skip="TO NEXT ROW") == [[0, 1], [1, 2], [2, 3], [3, 4]]
    assert run("A A A", define, xs, skip="TO LAST A") == [[0, 1, 2], [2, 3, 4]]


def test_alternation_prefers_the_left_branch_not_the_longest():
    define = "A AS x >= 1, B AS x = 2"
    assert run("(A | A B)", define, [1, 2]) == [[0], [1]]
    assert run("(A B | A)", define, [1, 2]) == [[0, 1]]
