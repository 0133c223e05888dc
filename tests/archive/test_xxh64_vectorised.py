"""The vectorised source ids equal the row-by-row definition (and so Spark's xxhash64,
which tests/archive checks against the definition)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.ids import source_ids, source_ids_reference
from archive.types import ColumnType as T

COLS = [("ts", T.TIMESTAMPTZ), ("s", T.TEXT), ("d", T.DOUBLE), ("i", T.BIGINT), ("b", T.BOOLEAN)]

rows = st.lists(st.tuples(
    st.integers(-2_000_000_000_000_000, 4_000_000_000_000_000),
    st.one_of(st.none(), st.text(max_size=40)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    st.one_of(st.none(), st.booleans()),
), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(rows)
def test_vectorised_ids_equal_the_definition(data):
    frame = pd.DataFrame({
        "ts": pd.to_datetime([r[0] for r in data], unit="us", utc=True),
        "s": pd.array([r[1] for r in data], dtype=object),
        "d": pd.array([None if r[2] is None else r[2] for r in data], dtype="Float64"),
        "i": pd.array([r[3] for r in data], dtype="Int64"),
        "b": pd.array([r[4] for r in data], dtype="boolean"),
    })
    frame["d"] = frame["d"].astype("float64")  # NaN stays NaN; None becomes NaN as in the archive
    want = source_ids_reference("stream_x", frame, COLS)
    got = source_ids("stream_x", frame, COLS)
    assert got.dtype == np.int64
    assert list(got) == list(want)


def test_negative_zero_and_nan_are_canonical():
    frame = pd.DataFrame({"ts": pd.to_datetime([0, 0, 0, 0], unit="us", utc=True), "s": ["a"] * 4,
                          "d": [0.0, -0.0, math.nan, float(np.float64(np.nan) * -1)],
                          "i": pd.array([1] * 4, dtype="Int64"), "b": pd.array([True] * 4, dtype="boolean")})
    ids = source_ids("s", frame, COLS)
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]


def _text_ids(values):
    frame = pd.DataFrame({"s": pd.array(values, dtype=object)})
    return list(source_ids("x", frame, [("s", T.TEXT)])), list(source_ids_reference("x", frame, [("s", T.TEXT)]))


def test_strings_differing_after_a_nul_get_their_own_ids():
    """pandas' factorize hashes strings as C strings, which end at a NUL: "a", "a\\x00b"
    and "a\\x00c" once shared one code, so one id (the flaky hypothesis failure)."""
    got, want = _text_ids(["a", "a\x00b", "a\x00c", "a", "\x00", ""])
    assert got == want
    assert len(set(got)) == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="a\x00b", max_size=4), min_size=1, max_size=30))
def test_nul_heavy_strings_equal_the_definition(values):
    got, want = _text_ids(values)
    assert got == want
