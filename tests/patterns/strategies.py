"""Hypothesis strategies for patterns, keyed row streams and batch splits (docs/PATTERNS.md)."""

from __future__ import annotations

import pandas as pd
from hypothesis import strategies as st

#: row-local DEFINEs over an integer column x in 0..3 (and PREV)
LOCAL = {
    "A": "x >= 2",
    "B": "x <= 1",
    "C": "x = PREV(x) OR x = 3",
}
#: DEFINEs that read bound rows (the NFA-with-runs engine)
DEPENDENT = {
    "A": "x >= 1 AND (LAST(A.x) IS NULL OR x >= LAST(A.x, 0))",
    "B": "x < LAST(A.x) OR COUNT(A.*) = 0",
    "C": "x = FIRST(A.x) OR x = 3",
}
SKIPS = ("PAST LAST ROW", "TO NEXT ROW", "TO FIRST A", "TO LAST B")


@st.composite
def pattern_text(draw, depth: int = 2, policies: bool = True) -> str:
    """A PATTERN body over A, B, C, with quantifiers, alternation and (optionally) ANY, NOT and
    the selection policies."""
    kinds = ["sym", "sym", "seq", "alt", "quant"]
    if policies:
        kinds += ["any", "not", "policy"]
    kind = draw(st.sampled_from(kinds if depth > 0 else ["sym", "sym", "any"] if policies else ["sym"]))
    sub = pattern_text(depth=depth - 1, policies=policies)
    if kind == "sym":
        return draw(st.sampled_from("ABC"))
    if kind == "any":
        return "ANY"
    if kind == "seq":
        return f"{draw(sub)} {draw(sub)}"
    if kind == "alt":
        return f"({draw(sub)} | {draw(sub)})"
    if kind == "quant":
        q = draw(st.sampled_from(["*", "+", "?", "{2}", "{1,2}", "{2,}", "{,2}"]))
        lazy = draw(st.sampled_from(["", "", "?"]))
        return f"({draw(sub)}){q}{lazy}"
    if kind == "not":
        return f"NOT({draw(sub)})"
    name = draw(st.sampled_from(["SKIP_TILL_ANY", "SKIP_TILL_NEXT"]))
    return f"{name}({draw(sub)}, {draw(sub)})"


def statement(body: str, defines: dict[str, str], skip: str, within: int | None) -> str:
    """A full MATCH_RECOGNIZE statement around ``body``."""
    used = [s for s in "ABC" if s in body.replace("ANY", "")]
    define = ", ".join(f"{s} AS {defines[s]}" for s in used)
    if skip.endswith(("A", "B")) and skip[-1] not in used:
        skip = "PAST LAST ROW"
    w = f"WITHIN {within}" if within is not None else ""
    wanted = {"A": "COUNT(A.*) AS na", "B": "SUM(B.x) AS sb", "C": "LAST(C.x) - FIRST(C.x) AS lc"}
    measures = "".join(f"{wanted[s]}, " for s in used)
    return (f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
            f"MEASURES {measures}MATCH_NUMBER() AS mn, "
            f"CLASSIFIER() AS cl AFTER MATCH SKIP {skip} PATTERN ({body}) {w} DEFINE {define})")


@st.composite
def keyed_rows(draw, max_rows: int = 24) -> pd.DataFrame:
    """Rows of two keys: event time in seconds (ties allowed), x in 0..3, a unique row id."""
    n = draw(st.integers(0, max_rows))
    keys = draw(st.lists(st.sampled_from(["k1", "k2"]), min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    xs = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    ts, t = [], 0
    for s in steps:
        t += s
        ts.append(float(t))
    return pd.DataFrame({"k": keys, "ts": ts, "row_id": list(range(n)), "x": xs})


@st.composite
def splits(draw, n: int) -> list[int]:
    """Cut points splitting ``n`` rows (in event-time order) into batches."""
    if n == 0:
        return []
    return sorted(set(draw(st.lists(st.integers(1, n), max_size=4))))
