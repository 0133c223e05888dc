"""Tier transitions (M 4.1; DESIGN.md §3): present -> recent builds the stream's indexes,
recent -> old drops them, whole chunks only, and no row is lost or duplicated."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive import Tier, simindex
from archive.names import index_name, partition_name
from tests.archive.arch_helpers import (
    T0,
    catalog_rows,
    fresh_archiver,
    indexes_of,
    make_archiver,
    partition_counts,
    rows,
    table_rows,
)

pytestmark = pytest.mark.postgres


def _tiers(arch):
    return {c.chunk_id: c.tier for c in arch.chunks("metrics")}


def _expected_indexes(arch, cid):
    return {index_name("metrics", cid, k) for k in range(len(arch.stream("metrics").indexes))}


def _autovacuum(arch) -> dict[str, bool]:
    """Partition name -> whether autovacuum may vacuum it (its reloptions)."""
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT c.relname, (SELECT o.option_value::boolean FROM pg_options_to_table(c.reloptions) o "
                    "WHERE o.option_name = 'autovacuum_enabled') FROM pg_inherits i JOIN pg_class c "
                    "ON c.oid = i.inhrelid WHERE i.inhparent = 'metrics'::regclass")
        return {name: on is not False for name, on in cur.fetchall()}


def check_layout(arch):
    """Every recent chunk has exactly the spec's indexes, present and old chunks none, and
    the catalog says the same as pg_indexes; autovacuum leaves present chunks alone only."""
    actual = indexes_of(arch)
    vacuumed = _autovacuum(arch)
    for info in arch.chunks("metrics"):
        have = actual.get(partition_name("metrics", info.chunk_id), set())
        want = _expected_indexes(arch, info.chunk_id) if info.tier is Tier.RECENT else set()
        assert have == want, (info.chunk_id, info.tier)
        assert set(info.indexes) == want
        assert vacuumed[partition_name("metrics", info.chunk_id)] is (info.tier is not Tier.PRESENT), info


def test_demote_builds_indexes_and_age_drops_them(archiver):
    archiver.append("metrics", 0, rows(60, step=timedelta(minutes=10)))  # chunks 0..9 of the test
    cids = sorted(_tiers(archiver))
    assert len(cids) == 10 and set(_tiers(archiver).values()) == {Tier.PRESENT}
    assert indexes_of(archiver) == {}
    check_layout(archiver)  # autovacuum off while present

    moves = archiver.demote(T0 + timedelta(hours=6))
    assert sorted(m.chunk_id for m in moves) == cids[:6]
    assert {(m.from_tier, m.to_tier, m.action) for m in moves} == {(Tier.PRESENT, Tier.RECENT, "demote")}
    check_layout(archiver)
    assert len(indexes_of(archiver)) == 6

    moves = archiver.age()  # R = 2: the 4 oldest recent chunks become old
    assert sorted(m.chunk_id for m in moves) == cids[:4]
    assert {(m.to_tier, m.action) for m in moves} == {(Tier.OLD, "unindex")}
    tiers = _tiers(archiver)
    assert [tiers[c] for c in cids] == [Tier.OLD] * 4 + [Tier.RECENT] * 2 + [Tier.PRESENT] * 4
    check_layout(archiver)
    assert archiver.age() == []  # idempotent

    # a wider R (new settings, same schema) re-indexes old chunks
    wider = make_archiver(archiver.db, recent=5)
    moves = wider.age()
    assert sorted(m.chunk_id for m in moves) == cids[1:4]
    assert {m.action for m in moves} == {"index"}
    check_layout(wider)
    wider.close()
    assert len(table_rows(archiver)) == 60


def test_demote_is_by_horizon_not_clock_and_never_goes_back(archiver):
    archiver.append("metrics", 0, rows(30, step=timedelta(minutes=10)))
    assert archiver.demote(T0 + timedelta(minutes=59)) == []  # no chunk wholly behind it
    assert len(archiver.demote(T0 + timedelta(hours=2))) == 2
    assert archiver.demote(T0 + timedelta(hours=1)) == []  # an older horizon changes nothing
    assert archiver.horizon("metrics") == T0 + timedelta(hours=2)
    # chunks created behind the horizon by late rows are not present
    result = archiver.append("metrics", 1, rows(2, start=T0 - timedelta(hours=5), first=99))
    assert _tiers(archiver)[result.chunks[0]] is not Tier.PRESENT


def test_bulk_history_ahead_of_the_horizon_is_present_so_live_rows_are_not_late(archiver):
    """A loaded history (bulk: old chunks) whose last chunk reaches past the horizon, as a
    day-long chunk does when history ends at noon: demote makes that chunk present (only
    the horizon moves a chunk out of the present tier), so the live rows that follow into
    it are not counted late; the chunks behind the horizon stay old."""
    archiver.append("metrics", -1, rows(30, step=timedelta(minutes=10)), bulk=True)  # T0 .. T0+4h50
    assert set(_tiers(archiver).values()) == {Tier.OLD}
    horizon = T0 + timedelta(hours=4, minutes=30)  # the history ends inside the 5th chunk
    moves = archiver.demote(horizon)
    last = archiver.grid.chunk_of(horizon)
    assert [(m.chunk_id, m.from_tier, m.to_tier, m.action) for m in moves] == [
        (last, Tier.OLD, Tier.PRESENT, "revive")]
    assert {c: t for c, t in _tiers(archiver).items() if c != last} == {
        c: Tier.OLD for c in _tiers(archiver) if c != last}
    live = archiver.append("metrics", 0, rows(3, start=horizon + timedelta(minutes=1), first=500))
    assert (live.rows, live.late_rows) == (3, 0)
    check_layout(archiver)
    assert archiver.demote(horizon) == []  # nothing left to revive


def test_a_revived_chunk_loses_its_similarity_index(archiver):
    """A revived chunk's rows will change, so a similarity index persisted for it (built
    while it was old) is dropped, persisted and in memory, and rebuilt once it is sealed
    again; the other chunks keep theirs."""
    archiver.append("metrics", -1, rows(30, step=timedelta(minutes=10)), bulk=True)
    horizon = T0 + timedelta(hours=4, minutes=30)
    last = archiver.grid.chunk_of(horizon)
    store = archiver.index_store("sim")
    for c in _tiers(archiver):
        store.save(c, ["metrics"], 1, b"blob", [])
    told: list[tuple[str, list[int]]] = []

    def listener(stream, ids):
        told.append((stream, list(ids)))

    simindex.listen(listener)
    try:
        archiver.demote(horizon)
    finally:
        simindex.unlisten(listener)
    assert told == [("metrics", [last])]
    assert sorted(store.chunk_ids()) == sorted(c for c in _tiers(archiver) if c != last)


def test_two_passes_demoting_the_same_large_chunk_at_once_both_succeed(archiver):
    """Two maintenance passes over one chunk at once (an engine's last pass beside its
    background one still building the indexes, or two processes on one archive): the
    indexes are built once and neither pass fails. ``CREATE INDEX IF NOT EXISTS`` alone
    lets both find the index missing, and the second then fails on ``pg_class``; the
    chunk's 200,000 rows keep the first build going while the second starts."""
    import threading

    archiver.append("metrics", 0, rows(200_000, step=timedelta(milliseconds=10), hosts=50))
    assert len(_tiers(archiver)) == 1
    other = make_archiver(archiver.db)
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    moves: list[list] = []

    def demote(arch):
        start.wait()
        try:
            moves.append(arch.demote(T0 + timedelta(hours=6)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=demote, args=(a,)) for a in (archiver, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    other.close()
    assert errors == []
    assert [len(m) for m in moves] == [1, 1]  # each pass found the chunk present and moved it
    check_layout(archiver)


def test_demote_rejects_naive_horizon(archiver):
    with pytest.raises(ValueError, match="timezone-aware"):
        archiver.demote(T0.replace(tzinfo=None))


def test_index_speeds_a_recent_chunk_query(archiver):
    """The planner can use a recent chunk's index (a real index, not just a catalog entry)."""
    archiver.append("metrics", 0, rows(3000, step=timedelta(seconds=1), hosts=500))
    archiver.demote(T0 + timedelta(hours=1))
    part = partition_name("metrics", archiver.grid.chunk_of(T0))
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f'ANALYZE "{part}"')
        cur.execute("SET enable_seqscan = off")
        cur.execute(f"EXPLAIN SELECT * FROM \"{part}\" WHERE host = 'h7'")
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert index_name("metrics", archiver.grid.chunk_of(T0), 0) in plan


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_transitions_never_lose_or_duplicate_rows(pg_dsn, data):
    """Random batches (some late) interleaved with demotions and agings: the archive
    always holds every appended row exactly once, counts match, layouts match tiers."""
    recent = data.draw(st.integers(0, 3), label="R")
    steps = data.draw(st.lists(st.one_of(
        st.tuples(st.just("append"), st.integers(0, 25), st.integers(0, 12 * 60), st.integers(1, 40)),
        st.tuples(st.just("demote"), st.integers(0, 14)),
        st.just(("age",)),
    ), min_size=1, max_size=10), label="steps")
    with fresh_archiver(pg_dsn, recent=recent) as arch:
        expected, batch = [], 0
        for step in steps:
            if step[0] == "append":
                _, n, offset_min, every_min = step
                frame = rows(n, start=T0 + timedelta(minutes=offset_min), step=timedelta(minutes=every_min),
                             first=len(expected))
                arch.append("metrics", batch, frame)
                arch.append("metrics", batch, frame)  # and a replay
                expected.extend(frame["n"])
                batch += 1
            elif step[0] == "demote":
                arch.demote(T0 + timedelta(hours=step[1]))
            else:
                arch.age()
        got = table_rows(arch)["n"].tolist()
        assert got == sorted(expected)
        assert catalog_rows(arch) == partition_counts(arch)
        horizon = arch.horizon("metrics")
        for info in arch.chunks("metrics"):
            if info.tier is Tier.PRESENT:
                assert horizon is None or info.end > horizon
        arch.age()
        check_layout(arch)
        behind = [c for c in arch.chunks("metrics") if c.tier is not Tier.PRESENT]
        assert [c.tier for c in behind] == [Tier.RECENT] * min(recent, len(behind)) + \
            [Tier.OLD] * max(0, len(behind) - recent)
        assert table_rows(arch)["n"].tolist() == sorted(expected)
