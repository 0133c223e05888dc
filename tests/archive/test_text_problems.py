"""archive.validate.text_problems (the batch-wide check) gives each string exactly the
reason text_problem gives it alone, and None to everything else, whatever the column
holds: plain text, NULs, unpaired surrogates, non-ASCII text, values over the length
limit, missing values and non-strings."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import archive.validate as validate
from archive.validate import text_problem, text_problems

_chars = st.sampled_from(["a", "z", "0", "\x00", "\ud800", "\udfff", "é", "漢", "\x01", " "])
_values = st.one_of(st.text(_chars, max_size=12), st.none(), st.floats(allow_nan=True), st.integers())


@settings(max_examples=300, deadline=None)
@given(st.lists(_values, max_size=30), st.sampled_from([5, 1_000_000]))
def test_batch_check_equals_the_per_value_check(values, limit):
    old = validate.MAX_TEXT_CHARS
    validate.MAX_TEXT_CHARS = limit
    try:
        got = list(text_problems(pd.Series(values, dtype=object)))
        assert got == [text_problem(v) if isinstance(v, str) else None for v in values]
    finally:
        validate.MAX_TEXT_CHARS = old
