"""Source ids (A 5): Python's :func:`archive.ids.source_ids` equals the Spark expression
:func:`archive.ids.spark_source_id` over the same rows, and Ananke's provenance ids
(:func:`ananke.ids.source_id_col`) are that expression, so a tuple gets one id whichever
way it is archived or traced."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive import StreamSpec
from archive.ids import source_ids
from archive.spark_sink import archive_batches, prepare_batch
from archive.types import NULLABLE_DTYPES as _NULLABLE
from archive.validate import split_batch

pytestmark = pytest.mark.spark

SPEC = StreamSpec.build("allkinds", "ts", {"s": "text", "d": "double", "b": "bigint", "f": "bool",
                                           "t2": "timestamp"})
SCHEMA = "ts timestamp, s string, d double, b bigint, f boolean, t2 timestamp"
COLS = ["ts", "s", "d", "b", "f", "t2"]

EDGE_ROWS = [
    (datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), "plain", 1.5, 7, True, None),
    (datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "héllo ✓ 日本 🚀", -0.0, -1, False,
     datetime(1900, 1, 1, tzinfo=UTC)),
    (datetime(1901, 2, 3, 4, 5, 6, 7, tzinfo=UTC), "", 0.0, -(2**63), None, datetime(2200, 1, 1, tzinfo=UTC)),
    (datetime(2200, 12, 31, tzinfo=UTC), None, float("nan"), 2**63 - 1, True, None),
    (datetime(2024, 5, 1, tzinfo=UTC), "x", float("inf"), None, False, datetime(1970, 1, 1, tzinfo=UTC)),
    (datetime(2024, 5, 1, tzinfo=UTC), "x", float("-inf"), 0, None, None),
    (datetime(2024, 5, 1, tzinfo=UTC), None, None, None, None, None),
    (datetime(2024, 5, 1, tzinfo=UTC), "null", -2.5e-308, -42, True, None),
]


def _arrow(rows) -> pa.Table:
    """The rows as Spark's Arrow batches carry them (NaN and null distinct)."""
    types = [pa.timestamp("us", tz="UTC"), pa.string(), pa.float64(), pa.int64(), pa.bool_(),
             pa.timestamp("us", tz="UTC")]
    return pa.table([pa.array([r[i] for r in rows], type=t) for i, t in enumerate(types)], names=COLS)


def _python_ids(rows):
    frame = _arrow(rows).to_pandas(types_mapper=_NULLABLE.get)
    good, dead = split_batch(frame, SPEC.ts_col, SPEC.columns, SPEC.name)
    assert not dead
    return source_ids(SPEC.name, good, SPEC.id_columns).tolist()


def _spark_ids(spark, rows):
    df = spark.createDataFrame(rows, SCHEMA)
    return [r["_sid"] for r in prepare_batch(df, SPEC).select("_sid").collect()]


def test_edge_values_hash_like_spark(spark):
    py, sp = _python_ids(EDGE_ROWS), _spark_ids(spark, EDGE_ROWS)
    assert py == sp
    assert len(set(py)) == len(py)  # the edge rows are distinct tuples


def test_negative_zero_and_nan_fold_like_spark(spark):
    base = (datetime(2024, 1, 1, tzinfo=UTC), "a", 0.0, 1, True, None)
    neg = (*base[:2], -0.0, *base[3:])
    nan2 = (*base[:2], float("nan"), *base[3:])
    nan3 = (*base[:2], -float("nan"), *base[3:])
    py = _python_ids([base, neg, nan2, nan3])
    assert py == _spark_ids(spark, [base, neg, nan2, nan3])
    assert py[0] == py[1] and py[2] == py[3]


_times = st.datetimes(min_value=datetime(1900, 1, 1, tzinfo=UTC).replace(tzinfo=None),
                      max_value=datetime(2200, 1, 1, tzinfo=UTC).replace(tzinfo=None),
                      timezones=st.just(UTC))
_row = st.tuples(_times, st.one_of(st.none(), st.text(max_size=8)),
                 st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
                 st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
                 st.one_of(st.none(), st.booleans()), st.one_of(st.none(), _times))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_row, min_size=1, max_size=20))
def test_random_rows_hash_like_spark(spark, rows):
    rows = [r for r in rows if "\x00" not in (r[1] or "")]  # PostgreSQL text cannot hold NUL
    if rows:
        assert _python_ids(rows) == _spark_ids(spark, rows)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_row, min_size=1, max_size=20), st.sampled_from(["allkinds", "m", "cx_users"]))
def test_the_spark_expression_and_the_python_function_agree(spark, rows, stream):
    """One definition: the archive's Spark expression, Ananke's provenance id column and
    the Python function give every generated row the same id."""
    from ananke.ids import source_id_col
    from archive.ids import spark_source_id

    rows = [r for r in rows if "\x00" not in (r[1] or "")]
    if not rows:
        return
    spec = StreamSpec.build(stream, SPEC.ts_col, {c: t for c, t in SPEC.columns.items()})
    frame = _arrow(rows).to_pandas(types_mapper=_NULLABLE.get)
    good, dead = split_batch(frame, spec.ts_col, spec.columns, stream)
    assert not dead
    python = source_ids(stream, good, spec.id_columns).tolist()
    got = spark.createDataFrame(rows, SCHEMA).select(
        spark_source_id(stream, COLS).alias("archive"), source_id_col(stream, "ts", COLS[1:]).alias("ananke")).collect()
    assert [r["archive"] for r in got] == python
    assert [r["ananke"] for r in got] == python


@pytest.mark.postgres
def test_pandas_append_and_spark_sink_give_identical_sids(spark, pg):
    from archive import Archiver, ArchiveSettings

    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(days=365 * 400)))
    try:
        arch.register_stream(SPEC)
        # in a plain pandas frame NaN means missing (pandas' convention), so no NaN here
        rows = [r for r in EDGE_ROWS if not (isinstance(r[2], float) and math.isnan(r[2]))]
        arch.append("allkinds", 0, pd.DataFrame(rows, columns=COLS))
        archive_batches(arch, "allkinds")(spark.createDataFrame(rows, SCHEMA), 1)
        archive_batches(arch, "allkinds")(spark.createDataFrame(EDGE_ROWS, SCHEMA), 2)
        arch.append("allkinds", 3, _arrow(EDGE_ROWS))
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT _batch, array_agg(_sid ORDER BY _sid) FROM allkinds GROUP BY _batch")
            by_batch = dict(cur.fetchall())
            cur.execute("SELECT b, d::text FROM allkinds WHERE _batch = 2 AND (d = 'NaN' OR d IS NULL) ORDER BY 2")
            nan_or_null = cur.fetchall()
        assert len(by_batch[0]) == len(rows)
        assert by_batch[0] == by_batch[1]
        assert sorted(by_batch[0]) == sorted(_python_ids(rows))
        assert by_batch[2] == by_batch[3] == sorted(_python_ids(EDGE_ROWS))
        assert nan_or_null == [(2**63 - 1, "NaN"), (None, None)]  # NaN archived as NaN, not as null
    finally:
        arch.close()


NUL_TEXT = ["a", "a\x00b", "a\x00c", "\x00", "b"]


def test_nul_strings_hash_like_spark(spark):
    """Spark hashes a string's UTF-8 bytes, NUL included; so do both Python hashes."""
    from archive.ids import source_ids_reference

    rows = [(datetime(2024, 5, 1, tzinfo=UTC), s, 1.0, 1, True, None) for s in NUL_TEXT]
    frame = _arrow(rows).to_pandas(types_mapper=_NULLABLE.get)
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
    want = source_ids_reference(SPEC.name, frame, SPEC.id_columns).tolist()
    assert source_ids(SPEC.name, frame, SPEC.id_columns).tolist() == want
    assert _spark_ids(spark, rows) == want
    assert len(set(want)) == len(NUL_TEXT)


@pytest.mark.postgres
def test_spark_sink_dead_letters_nul_strings_and_goes_on(spark, pg):
    from archive import Archiver, ArchiveSettings

    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(days=1)))
    try:
        arch.register_stream(SPEC)
        rows = [(datetime(2024, 5, 1, 0, i, tzinfo=UTC), s, 1.0, i, True, None) for i, s in enumerate(NUL_TEXT)]
        archive_batches(arch, "allkinds")(spark.createDataFrame(rows, SCHEMA), 0)
        archive_batches(arch, "allkinds")(spark.createDataFrame(rows[:1], SCHEMA), 1)
        dead = arch.dead_letters("allkinds")
        assert sorted(d["row"]["b"] for d in dead) == [1, 2, 3]
        assert all("NUL character" in d["reason"] and "column 's'" in d["reason"] for d in dead)
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT _batch, s, _sid FROM allkinds ORDER BY _batch, s")
            got = cur.fetchall()
        good = [r for r in rows if "\x00" not in r[1]]
        assert [(b, s) for b, s, _ in got] == [(0, "a"), (0, "b"), (1, "a")]
        assert sorted(sid for b, _, sid in got if b == 0) == sorted(_python_ids(good))
    finally:
        arch.close()
