"""Late rows and dead letters (DESIGN.md §3 "Late tuples", §6 "malformed rows go to a
dead-letter table with a reason"): the batch always goes on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from archive import Tier
from tests.archive.arch_helpers import T0, catalog_rows, partition_counts, rows, table_rows

pytestmark = pytest.mark.postgres


def _chunk(arch, cid):
    return next(c for c in arch.chunks("metrics") if c.chunk_id == cid)


def test_late_rows_land_in_their_demoted_chunk_and_are_counted(archiver):
    archiver.append("metrics", 0, rows(30))  # 30 rows * 7 min: chunks T0 .. T0+3h
    first = archiver.grid.chunk_of(T0)
    archiver.demote(T0 + timedelta(hours=2))
    assert _chunk(archiver, first).tier is Tier.RECENT
    late = rows(4, start=T0 + timedelta(minutes=1), step=timedelta(minutes=2), first=100)
    result = archiver.append("metrics", 1, late)
    assert (result.rows, result.late_rows, result.dead_letters) == (4, 4, 0)
    info = _chunk(archiver, first)
    assert (info.tier, info.late_rows) == (Tier.RECENT, 4)
    assert info.rows == partition_counts(archiver)[first]
    assert set(range(100, 104)) <= set(table_rows(archiver)["n"])
    assert archiver.status()["streams"]["metrics"]["late_rows"] == 4


def test_late_rows_for_old_and_for_never_seen_chunks(archiver):
    archiver.append("metrics", 0, rows(60, step=timedelta(minutes=10)))  # 10 hours
    archiver.demote(T0 + timedelta(hours=9))
    archiver.age()  # R = 2: chunks 0..6 old
    first = archiver.grid.chunk_of(T0)
    assert _chunk(archiver, first).tier is Tier.OLD
    before = T0 - timedelta(days=3)  # behind the horizon, a chunk that never existed
    late = pd.concat([rows(2, start=T0 + timedelta(minutes=5), first=500),
                      rows(3, start=before, first=600)], ignore_index=True)
    result = archiver.append("metrics", 1, late)
    assert (result.rows, result.late_rows) == (5, 5)
    assert _chunk(archiver, first).late_rows == 2
    new = _chunk(archiver, archiver.grid.chunk_of(before))
    assert (new.tier, new.rows, new.late_rows) == (Tier.OLD, 3, 3)
    assert catalog_rows(archiver) == partition_counts(archiver)


def test_rows_inside_the_present_tier_are_not_late(archiver):
    archiver.demote(T0)
    result = archiver.append("metrics", 0, rows(10, start=T0 + timedelta(minutes=1)))
    assert (result.rows, result.late_rows) == (10, 0)


def test_malformed_rows_are_dead_letters_naming_column_and_value(archiver):
    batch = pd.DataFrame({
        "ts": ["2024-01-01T00:10:00Z", None, "not a time", "2024-01-01T00:20:00Z",
               "2024-01-01T00:30:00Z", "2024-01-01T00:40:00Z"],
        "host": ["a", "b", "c", "d", "e", "f"],
        "v": ["1.5", "2", "3", "abc", "4", "5"],
        "n": ["1", "2", "3", "4", "4.5", "six"],
    })
    result = archiver.append("metrics", 0, batch)
    assert (result.rows, result.dead_letters, result.duplicate) == (1, 5, False)
    dead = archiver.dead_letters("metrics")
    by_host = {d["row"]["host"]: d for d in dead}
    assert set(by_host) == {"b", "c", "d", "e", "f"}
    assert by_host["b"]["reason"] == "no event time in column 'ts'"
    assert "'not a time'" in by_host["c"]["reason"] and "'ts'" in by_host["c"]["reason"]
    assert "'abc'" in by_host["d"]["reason"] and "'v'" in by_host["d"]["reason"]
    assert "4.5" in by_host["e"]["reason"] and "'n'" in by_host["e"]["reason"]
    assert "'six'" in by_host["f"]["reason"] and "bigint" in by_host["f"]["reason"]
    assert all(d["batch_id"] == 0 for d in dead)
    got = table_rows(archiver)
    assert got["host"].tolist() == ["a"] and got["v"].tolist() == [1.5]
    assert archiver.status()["totals"]["dead_letters"] == 5
    # the stream goes on: the next batch archives normally
    assert archiver.append("metrics", 1, rows(3, first=10)).rows == 3


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_batch_with_wrong_columns_is_dead_lettered_and_the_stream_goes_on(archiver, change):
    batch = rows(4)
    batch = batch.drop(columns=["v"]) if change == "missing" else batch.assign(zzz=1)
    result = archiver.append("metrics", 0, batch)
    assert (result.rows, result.dead_letters, result.duplicate) == (0, 4, False)
    reasons = {d["reason"] for d in archiver.dead_letters("metrics")}
    assert len(reasons) == 1
    reason = reasons.pop()
    assert ("missing column(s) ['v']" if change == "missing" else "unexpected column(s) ['zzz']") in reason
    assert archiver.batch_ids("metrics") == [0]
    assert archiver.append("metrics", 0, batch).duplicate  # dead letters are exactly-once too
    assert len(archiver.dead_letters("metrics")) == 4
    assert archiver.append("metrics", 1, rows(3)).rows == 3


def test_batch_without_event_time_column_is_dead_lettered(archiver):
    result = archiver.append("metrics", 0, rows(3).drop(columns=["ts"]))
    assert (result.rows, result.dead_letters) == (0, 3)
    assert "missing column(s) ['ts']" in archiver.dead_letters("metrics")[0]["reason"]


def test_empty_batch_is_recorded(archiver):
    result = archiver.append("metrics", 0, rows(0))
    assert (result.rows, result.dead_letters, result.duplicate) == (0, 0, False)
    assert archiver.batch_ids("metrics") == [0]


@pytest.mark.parametrize(("when", "step"), [
    (datetime(1900, 3, 1, 12, tzinfo=UTC), timedelta(seconds=1)),
    (datetime(2200, 7, 4, tzinfo=UTC), timedelta(seconds=1)),
    (datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), timedelta(microseconds=-1)),  # chunk -1
])
def test_far_past_and_future_times_create_partitions_on_demand(archiver, when, step):
    result = archiver.append("metrics", 0, rows(3, start=when, step=step))
    cid = archiver.grid.chunk_of(when)
    assert result.chunks == (cid,) and result.rows == 3
    info = _chunk(archiver, cid)
    assert info.start <= when < info.end
    assert partition_counts(archiver) == {cid: 3}
    got = table_rows(archiver)
    assert got["ts"].tolist() == [when + i * step for i in range(3)]
    q = archiver.prepare("SELECT n FROM metrics ORDER BY n")
    assert archiver.run_history_query(q, {}, cid)["n"].tolist() == [0, 1, 2]
    assert archiver.run_history_query(q, {}, cid + 1).empty


UNSTORABLE = ["a\x00b", "\x00", "x\ud800", "\udfff"]


def test_text_postgresql_cannot_hold_is_dead_lettered_with_the_reason(archiver):
    """NUL and unpaired surrogates: dead letters naming column, value and
    why; the rest of the batch and the next batch archive normally, with the ids the
    reference hash gives them."""
    batch = rows(6)
    batch["host"] = ["ok1", *UNSTORABLE, "ok2"]
    result = archiver.append("metrics", 0, batch)
    assert (result.rows, result.dead_letters, result.duplicate) == (2, 4, False)
    dead = archiver.dead_letters("metrics")
    reasons = [d["reason"] for d in dead]
    assert all("column 'host'" in r for r in reasons), reasons
    assert sum("NUL character" in r and "PostgreSQL text cannot hold" in r for r in reasons) == 2
    assert sum("unpaired surrogate" in r for r in reasons) == 2
    # the row is kept as it came, the unstorable characters spelled as escapes
    assert sorted(d["row"]["host"] for d in dead) == sorted(["a\\u0000b", "\\u0000", "x\\ud800", "\\udfff"])
    assert sorted(d["row"]["n"] for d in dead) == [1, 2, 3, 4]
    got = table_rows(archiver)
    assert sorted(got["host"]) == ["ok1", "ok2"]
    assert archiver.append("metrics", 1, rows(3, first=10)).rows == 3  # the stream goes on
    assert archiver.status()["totals"]["dead_letters"] == 4


def test_dead_letter_of_a_row_with_a_nul_is_stored(archiver):
    archiver.dead_letter("metrics", {"host": "a\x00", "k\x00": 1}, "refused: a\x00")
    (d,) = archiver.dead_letters("metrics")
    assert d["row"] == {"host": "a\\u0000", "k\\u0000": 1} and d["reason"] == "refused: a\\u0000"
