"""Reading back a window's source tuples (archive.contributors, for ananke.digest):
the rows of one key and time span, with their ids and arrival order, through the BRIN
index on event time, and the resolver's match against a digest on a real archive."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.digest import match, xor_ids
from archive.contributors import ensure_time_index, time_index_name, window_rows
from tests.archive.arch_helpers import T0, rows, table_rows

pytestmark = pytest.mark.postgres


def _archive(archiver, batches):
    for b, frame in enumerate(batches):
        archiver.append("metrics", b, frame)


def test_window_rows_are_the_key_and_span_in_arrival_order(archiver):
    ensure_time_index(archiver, "metrics")
    ensure_time_index(archiver, "metrics")  # idempotent
    early = rows(30, step=timedelta(minutes=3))  # h0, h1, h2 in turn, over two chunks made after the index
    late = rows(2, start=T0 + timedelta(minutes=3), first=99)  # h0 and h1, later, into the first window
    _archive(archiver, [early, late])
    all_rows = table_rows(archiver)
    lo, hi = T0, T0 + timedelta(minutes=10)
    got = window_rows(archiver, "metrics", ["host"], [(("h0",), lo, hi), (("h1",), lo, hi),
                                                     (("nobody",), lo, hi), ((None,), lo, hi)])
    for i, host in enumerate(["h0", "h1"]):
        want = all_rows[(all_rows.host == host) & (all_rows.ts >= lo) & (all_rows.ts < hi)]
        assert sorted(r[0] for r in got[i]) == sorted(want._sid.tolist())
        assert [r[2] for r in got[i]] == sorted(r[2] for r in got[i])  # arrival (batch) order
    assert any(r[2] == 1 for r in got[0])  # the later batch's h0 row is among h0's
    assert got[2] == [] and got[3] == []
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", (time_index_name("metrics"),))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT count(*) FROM pg_indexes WHERE indexdef ILIKE '%%USING brin%%' AND tablename LIKE 'metrics__c%%'")
        assert cur.fetchone()[0] >= 2  # every chunk has it


def test_window_rows_reads_a_null_key_and_refuses_an_unknown_column(archiver):
    frame = rows(6, step=timedelta(minutes=1))
    frame.loc[frame.index[:2], "host"] = None
    _archive(archiver, [frame])
    got = window_rows(archiver, "metrics", ["host"], [((None,), T0, T0 + timedelta(hours=1)),
                                                     (("h1\x00",), T0, T0 + timedelta(hours=1))])
    assert len(got[0]) == 2
    assert got[1] == []  # a NUL cannot be in PostgreSQL text (psycopg2 would refuse to bind it)
    with pytest.raises(KeyError, match="nope"):
        window_rows(archiver, "metrics", ["nope"], [(("x",), T0, T0 + timedelta(hours=1))])


def test_a_digest_singles_out_a_tuple_the_window_never_saw(archiver):
    """A window that aggregated the first batch's h0 rows only (the later one came after
    it was emitted): the archive holds one more, and the digest removes exactly it."""
    first = rows(12, step=timedelta(seconds=20))
    again = rows(1, start=T0 + timedelta(seconds=30), first=500)  # h... of n=500: host h2 (500 % 3)
    _archive(archiver, [first, again])
    all_rows = table_rows(archiver)
    lo, hi = T0, T0 + timedelta(minutes=5)
    seen = all_rows[(all_rows.host == "h2") & (all_rows._batch == 0)]
    cands = window_rows(archiver, "metrics", ["host"], [(("h2",), lo, hi)])[0]
    assert len(cands) == len(seen) + 1
    m = match(cands, len(seen), xor_ids(seen._sid))
    assert m.removed == 1
    assert sorted(r[0] for r in m.rows) == sorted(seen._sid.tolist())
