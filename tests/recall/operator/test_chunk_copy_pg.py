"""The bulk chunk read behind the similarity index build (archive/chunk_copy.py) returns
exactly what PostgreSQL holds, whichever format it took: text format when no value
needs an escape, CSV when one does (backslashes, tabs, newlines, a literal ``\\N``),
NULL apart from the empty string, times to the microsecond. Both servers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive import Archiver, ArchiveSettings, Database, StreamSpec
from archive.chunk_copy import TS_US, Read, codes

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SPAN = timedelta(hours=1)

_value = st.one_of(st.none(), st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=6),
                   st.sampled_from(["\\N", "\\", "a\tb", "l1\nl2", "r\r", "", "é€", "\\\\N", '"q",']))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.integers(0, 3_599_999_999), _value, _value), min_size=1, max_size=25))
def test_a_chunk_reads_back_exactly(pg_dsn, rows):
    db = Database(pg_dsn, schema=f"h_{uuid.uuid4().hex[:12]}")
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN))
    try:
        arch.register_stream(StreamSpec.build("cx", "ts", {"eid": "text", "u": "text", "v": "text"}))
        frame = pd.DataFrame([{"ts": T0 + timedelta(microseconds=us), "eid": f"e{i}", "u": u, "v": v}
                              for i, (us, u, v) in enumerate(rows)])
        arch.append("cx", 1, frame, bulk=True)
        (chunk,) = arch.chunk_ids(["cx"])
        plain, coded = arch.copy_reads([Read("cx", [("eid", "e.eid::text"), ("u", "e.u::text"), ("v", "e.v::text")]),
                                         Read("cx", [("eid", "e.eid::text"), ("v", "e.v::text")], with_ts=False,
                                              coded=True)], chunk, ["cx"])
        got = sorted(zip(plain.column(TS_US).to_pylist(), plain.column("eid").to_pylist(),
                         plain.column("u").to_pylist(), plain.column("v").to_pylist(), strict=True))
        want = sorted((us + int((T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10**6, f"e{i}", u, v)
                      for i, (us, u, v) in enumerate(rows))
        assert got == want
        c, uniques = codes(coded, "v")
        values = [None if k < 0 else uniques[k] for k in c]
        assert sorted(zip(coded.column("eid").to_pylist(), values, strict=True)) == \
            sorted((f"e{i}", v) for i, (_, _, v) in enumerate(rows))
    finally:
        arch.close()
        db.drop_schema()


def test_times_are_exact_under_any_datestyle(pg):
    arch = Archiver(pg, ArchiveSettings(chunk_span=SPAN))
    try:
        arch.register_stream(StreamSpec.build("cx", "ts", {"eid": "text"}))
        frame = pd.DataFrame({"ts": [T0 + timedelta(microseconds=7), T0 + timedelta(minutes=3, microseconds=500_000)],
                              "eid": ["a", "b"]})
        arch.append("cx", 1, frame, bulk=True)
        (chunk,) = arch.chunk_ids(["cx"])
        want = [int(pd.Timestamp(t).value // 1000) for t in frame["ts"]]
        for style in ("ISO, MDY", "SQL, DMY", "German", "Postgres"):
            conn = arch.connect()
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"SET DateStyle = '{style}'")
            (t,) = arch.copy_reads([Read("cx", [("eid", "e.eid::text")])], chunk, ["cx"], conn)
            conn.close()
            assert sorted(t.column(TS_US).to_pylist()) == want, style
    finally:
        arch.close()
