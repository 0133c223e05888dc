"""A staged batch read back by COPY into Arrow (archive.stage_read), against real
PostgreSQL: every column type, NULLs, empty text, NaN and infinities, times before 1970."""

from __future__ import annotations

import math

import psycopg2
import pytest

from archive.stage_read import read_rows
from archive.types import ColumnType

ROWS = """SELECT g, 7,
  CASE WHEN g %% 11 = 0 THEN '1901-03-04 05:06:07.000008+00'::timestamptz
       ELSE '2026-01-01'::timestamptz + g * interval '1 microsecond' END,
  g %% 1000,
  CASE WHEN g %% 7 = 0 THEN 'NaN'::float8 WHEN g %% 13 = 0 THEN 'Infinity'::float8
       WHEN g %% 17 = 0 THEN '-Infinity'::float8 ELSE g / 3.0 END,
  CASE WHEN g %% 5 = 0 THEN NULL WHEN g %% 3 = 0 THEN '' ELSE 'a,"b' || chr(10) || g END,
  g %% 2 = 0
FROM generate_series(1, %s) g"""
TYPES = {"_sid": ColumnType.BIGINT, "ts": ColumnType.TIMESTAMPTZ, "sid": ColumnType.BIGINT,
         "bw": ColumnType.DOUBLE, "u": ColumnType.TEXT, "f": ColumnType.BOOLEAN}


@pytest.fixture
def cur(pg_dsn):
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    with conn.cursor() as c:
        c.execute("CREATE TEMP TABLE s (_sid bigint, _batch bigint, ts timestamptz, sid bigint, "
                  "bw double precision, u text, f boolean)")
        c.execute("INSERT INTO s " + ROWS, (500,))
        yield c
    conn.close()


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("names", [["_sid", "ts", "sid", "bw", "f"], ["_sid", "ts", "sid", "bw", "u", "f"]])
def test_read_rows_equals_the_rows_as_psycopg_reads_them(cur, names):
    got = read_rows(cur, "s", names, TYPES, "_batch = %s", (7,)).sort_by("_sid")
    assert got.schema.names == names and [f.type for f in got.schema] == [TYPES[c].arrow for c in names]
    cur.execute(f"SELECT {', '.join(names)} FROM s WHERE _batch = 7 ORDER BY _sid")
    want = cur.fetchall()
    rows = list(zip(*(got.column(c).to_pylist() for c in names), strict=True))
    assert len(rows) == len(want) == 500
    assert all(_same(x, y) for r, w in zip(rows, want, strict=True) for x, y in zip(r, w, strict=True))


def test_a_null_in_a_fixed_width_column_is_read_too(cur):
    cur.execute("UPDATE s SET sid = NULL WHERE _sid = 4")
    got = read_rows(cur, "s", ["_sid", "sid"], TYPES, "_batch = %s", (7,)).sort_by("_sid")
    assert got.column("sid").null_count == 1 and got.column("sid")[3].as_py() is None


def test_no_rows(cur):
    got = read_rows(cur, "s", ["_sid", "u"], TYPES, "_batch = %s", (8,))
    assert got.num_rows == 0 and got.schema.names == ["_sid", "u"]
    assert read_rows(cur, "s", ["_sid", "ts"], TYPES, "_batch = %s", (8,)).num_rows == 0
