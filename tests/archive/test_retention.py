"""Retention policies (DESIGN.md §3): keep all, keep only tuples with a provenance edge,
drop after N old chunks; only chunks wholly behind the expiry horizon are touched."""

from __future__ import annotations

from datetime import timedelta

import pytest

from archive import Contributing, Retention, RetentionPolicy, Tier
from archive.names import partition_name
from tests.archive.arch_helpers import T0, catalog_rows, metrics_spec, partition_counts, rows, table_rows

pytestmark = pytest.mark.postgres

HOURS = 10


def _setup(arch, policy: RetentionPolicy):
    """10 one-hour chunks of 6 rows; horizon at T0+8h; R = 2: chunks 0-5 old, 6-7 recent,
    8-9 present. Then 6 rows bulk-loaded into chunk 12 (old tier, but ahead of the horizon)."""
    arch.register_stream(metrics_spec(retention=policy))
    arch.append("metrics", 0, rows(6 * HOURS, step=timedelta(minutes=10)))
    arch.demote(T0 + timedelta(hours=8))
    arch.age()
    arch.append("metrics", 1, rows(6, start=T0 + timedelta(hours=12), step=timedelta(minutes=10), first=1000),
                bulk=True)
    tiers = {c.chunk_id - arch.grid.chunk_of(T0): c.tier for c in arch.chunks("metrics")}
    assert tiers == {**{h: Tier.OLD for h in range(6)}, 6: Tier.RECENT, 7: Tier.RECENT,
                     8: Tier.PRESENT, 9: Tier.PRESENT, 12: Tier.OLD}
    return arch.grid.chunk_of(T0)


def test_keep_all_touches_nothing(archiver):
    _setup(archiver, RetentionPolicy())
    before = table_rows(archiver)
    assert archiver.apply_retention() == []
    assert table_rows(archiver).equals(before)


def test_contributing_only_keeps_tuples_with_an_edge(archiver):
    c0 = _setup(archiver, RetentionPolicy(Retention.CONTRIBUTING_ONLY))
    everything = table_rows(archiver)
    keep = everything[everything["n"] % 4 == 0]
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE edges (src bigint, dst bigint)")
        cur.executemany("INSERT INTO edges VALUES (%s, 0)", [(int(s),) for s in keep["_sid"]])
    with pytest.raises(ValueError, match="no provenance edge table"):
        archiver.apply_retention()
    moves = archiver.apply_retention(Contributing("edges", "src"))
    assert sorted(m.chunk_id - c0 for m in moves) == list(range(6))
    assert {m.action for m in moves} == {"prune"}
    after = table_rows(archiver)
    hour = (after["ts"] - T0) // timedelta(hours=1)
    old_part = after[hour < 6]
    assert set(old_part["n"]) == {n for n in keep["n"] if n < 36}  # old chunks: only contributors
    assert len(after[hour >= 6]) == len(everything[(everything["ts"] - T0) // timedelta(hours=1) >= 6])
    assert catalog_rows(archiver) == {k: v for k, v in partition_counts(archiver).items()}
    assert sum(m.rows for m in moves) == 36 - len(old_part)
    # once per chunk: a later run with more edges does not bring anything back or re-prune
    assert archiver.apply_retention(Contributing("edges", "src")) == []


def test_drop_after_n_old_chunks_drops_whole_partitions_behind_the_horizon(archiver):
    c0 = _setup(archiver, RetentionPolicy(Retention.DROP_AFTER_N_OLD_CHUNKS, 2))
    moves = archiver.apply_retention()
    assert sorted(m.chunk_id - c0 for m in moves) == [0, 1, 2, 3]  # old 4, 5 kept; 12 is ahead
    assert {m.action for m in moves} == {"drop"} and sum(m.rows for m in moves) == 24
    left = {c.chunk_id - c0 for c in archiver.chunks("metrics")}
    assert left == {4, 5, 6, 7, 8, 9, 12}
    assert sorted(c - c0 for c in archiver.chunk_ids(["metrics"])) == sorted(left)
    with archiver.db.connection() as conn, conn.cursor() as cur:
        for h in range(4):
            cur.execute("SELECT to_regclass(%s)", (partition_name("metrics", c0 + h),))
            assert cur.fetchone()[0] is None
    assert archiver.status()["streams"]["metrics"]["dropped_chunks"] == 4
    assert len(table_rows(archiver)) == 6 * HOURS + 6 - 24
    assert archiver.apply_retention() == []
    # a late row for a dropped chunk revives it as an old chunk, counted
    result = archiver.append("metrics", 2, rows(1, start=T0 + timedelta(minutes=1), first=5000))
    assert result.late_rows == 1
    revived = next(c for c in archiver.chunks("metrics") if c.chunk_id == c0)
    assert (revived.tier, revived.rows, revived.late_rows) == (Tier.OLD, 1, 1)


def test_contributing_table_name_is_checked():
    with pytest.raises(ValueError, match="SQL identifiers"):
        Contributing("edges; DROP TABLE x", "src")
    assert Contributing("prov.edges", "src").sql() == ('"prov"."edges"', '"src"')
