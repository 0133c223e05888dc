"""The operator's output frames (moirae/patterns/spark_frame.py) are the frames pandas'
constructor and ``pd.concat`` make of the same columns: same dtypes, values and index."""

from __future__ import annotations

import datetime as dt
import warnings

import numpy as np
import pandas as pd
import pytest

from moirae.patterns.spark_frame import concat, frame, utc_times

T = pd.Timestamp("2024-01-01", tz="UTC")


def _objects(values: list) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def _columns(n: int) -> dict:
    """Columns of ``n`` rows of every kind the operator's output may hold (and some more)."""
    ns = np.arange(n, dtype=np.int64) * 1_000_000_000
    return {
        "ints": np.arange(n), "floats": np.arange(n) / 2, "bools": np.arange(n) % 2 == 0,
        "strings": _objects([f"s{i}" for i in range(n)]), "lists": _objects([[i, i + 1] for i in range(n)]),
        "utc": utc_times(ns), "index": pd.DatetimeIndex(ns.view("datetime64[ns]")).tz_localize("UTC"),
        "stamps": [T + pd.Timedelta(seconds=i) for i in range(n)],
        "stamp_objects": _objects([T] * n),
        "datetimes": [dt.datetime(2024, 1, 1 + i % 20) for i in range(n)],  # noqa: DTZ001 - naive on purpose
        "micros": ns.view("datetime64[ns]").astype("datetime64[us]"), "unicode": np.array(["u"] * n),
        "int_list": list(range(n)), "mixed": [i if i % 2 else None for i in range(n)],
        "nulls": [None] * n, "null_objects": _objects([None] * n), "float_list": [i + 0.5 for i in range(n)],
        "nullable": pd.array([i if i % 2 else None for i in range(n)], dtype="Int64"),
        "category": pd.Categorical(["a"] * n), "dicts": [{"i": i} for i in range(n)],
    }


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_frame_is_the_constructors(n):
    cols = _columns(n)
    got = frame(tuple(cols), list(cols.values()), frozenset({"strings", "lists"}))
    pd.testing.assert_frame_equal(got, pd.DataFrame(cols, copy=False))


def test_strings_not_kept_are_the_constructors():
    cols = {"s": _objects(["a", "2024-01-01", ""]), "mixed": _objects(["a", 1, None]), "none": _objects([None] * 3)}
    pd.testing.assert_frame_equal(frame(tuple(cols), list(cols.values())), pd.DataFrame(cols))


def test_object_columns_not_kept_are_inferred_as_the_constructor_does():
    cols = {"stamps": _objects([T, T]), "lists": _objects([[1], [2]])}
    assert frame(tuple(cols), list(cols.values())).dtypes.tolist() == pd.DataFrame(cols).dtypes.tolist()
    assert str(frame(tuple(cols), list(cols.values()))["stamps"].dtype) == "datetime64[ns, UTC]"


def test_a_frame_refuses_columns_of_other_lengths():
    with pytest.raises(ValueError, match="rows"):
        frame(("a", "b"), [np.arange(2), np.arange(3)])


@pytest.mark.parametrize("sizes", [(1,), (1, 2), (2, 0, 3)])
def test_parts_put_end_to_end_are_pd_concat_of_their_frames(sizes):
    parts = [list(_columns(n).values()) for n in sizes]
    names = tuple(_columns(0))
    with warnings.catch_warnings():  # all-NULL columns
        warnings.simplefilter("ignore", FutureWarning)
        want = pd.concat([pd.DataFrame(dict(zip(names, p, strict=True))) for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(concat(names, parts, frozenset({"strings", "lists"})), want)


def test_parts_of_different_types_are_joined_as_pd_concat_joins_them():
    names = ("eid", "n")
    parts = [[_objects(["a", "b"]), np.array([1, 2])], [_objects(["c"]), _objects([None])],
             [_objects(["d"]), np.array([0.5])]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = pd.concat([pd.DataFrame(dict(zip(names, p, strict=True))) for p in parts], ignore_index=True)
    got = concat(names, parts, frozenset({"eid"}))
    pd.testing.assert_frame_equal(got, want)
    assert got["n"].tolist()[:2] == [1, 2]
