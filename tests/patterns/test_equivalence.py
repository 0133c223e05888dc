"""The compiled matcher equals the brute-force reference (moirae/patterns/reference.py), for
every selection policy, with and without WITHIN, for every AFTER MATCH SKIP, whatever the
split of each key's rows into batches (docs/PATTERNS.md)."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from moirae.patterns import Matcher, PatternError, compile_pattern, reference_matches
from moirae.patterns.syntax import bounded
from tests.patterns.strategies import DEPENDENT, LOCAL, SKIPS, keyed_rows, pattern_text, splits, statement

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def streamed(matcher: Matcher, rows: pd.DataFrame, cuts: list[int], watermarks: bool):
    """Feed ``rows`` (all keys, event-time order) in batches cut at ``cuts``, then finish."""
    ordered = rows.sort_values(["ts", "row_id"], kind="stable").reset_index(drop=True)
    states: dict = {}
    out = []
    for lo, hi in zip([0, *cuts], [*cuts, len(ordered)], strict=True):
        batch = ordered.iloc[lo:hi]
        wm = float(batch["ts"].iloc[-1]) if watermarks and len(batch) else None
        got, states = matcher.advance_frame(states, batch, watermark=wm)
        out += got
    for key in list(states):
        got, states[key] = matcher.finish(states[key])
        out += got
    return sorted(out, key=lambda m: (m.key, m.match_number))


def check(body: str, defines: dict[str, str], skip: str, within: int | None, rows: pd.DataFrame,
          cuts: list[int], watermarks: bool) -> None:
    text = statement(body, defines, skip, within)
    try:
        cp = compile_pattern(text, name="prop", columns=["k", "ts", "row_id", "x"])
    except PatternError:
        assume(False)
        return
    want = reference_matches(cp, rows)
    got = streamed(Matcher(cp), rows, cuts, watermarks)
    assert got == want, text


@SETTINGS
@given(body=pattern_text(), skip=st.sampled_from(SKIPS), within=st.sampled_from([None, 3, 6]),
       rows=keyed_rows(), data=st.data(), watermarks=st.booleans())
def test_row_local_patterns_match_the_reference(body, skip, within, rows, data, watermarks):
    """DFA engine: every predicate row-local (current row and PREV)."""
    if within is None:
        from moirae.patterns.syntax import parse_pattern
        from moirae.patterns.tokens import Cursor
        assume(bounded(parse_pattern(Cursor(body, "p"))))
    check(body, LOCAL, skip, within, rows, data.draw(splits(len(rows))), watermarks)


@SETTINGS
@given(body=pattern_text(policies=False), skip=st.sampled_from(SKIPS), within=st.sampled_from([3, 6]),
       rows=keyed_rows(), data=st.data(), watermarks=st.booleans())
def test_bound_row_patterns_match_the_reference(body, skip, within, rows, data, watermarks):
    """NFA-with-runs engine: DEFINEs read FIRST/LAST/COUNT of bound rows."""
    check(body, DEPENDENT, skip, within, rows, data.draw(splits(len(rows))), watermarks)


@settings(max_examples=25, deadline=None)
@given(outer=st.sampled_from(["SKIP_TILL_ANY", "SKIP_TILL_NEXT"]), inner=st.sampled_from(["SKIP_TILL_ANY", "SKIP_TILL_NEXT"]),
       rows=keyed_rows(), data=st.data())
def test_nested_policies_match_the_reference(outer, inner, rows, data):
    """The selection policies nest (T 3, Def. 3.2): a policy inside another's sub-pattern."""
    body = f"{outer}(A, {inner}(B, C)) A?"
    check(body, LOCAL, "PAST LAST ROW", 8, rows, data.draw(splits(len(rows))), True)
