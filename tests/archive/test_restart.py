"""Restart (DESIGN.md §6 "after crashes and restarts"): everything the Archiver knows is
in PostgreSQL, so a new Archiver on the same schema carries on where the old one stopped;
the in-memory present tier is rebuilt from PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive import SchemaConflict, StreamSpec, Tier
from tests.archive.arch_helpers import T0, make_archiver, metrics_spec, rows, table_rows

pytestmark = pytest.mark.postgres


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    out = df[["_sid", "ts", "host", "v", "n"]].copy()
    out["ts"] = pd.to_datetime(out["ts"], utc=True).astype("datetime64[us, UTC]")
    out["v"] = out["v"].astype(float)
    out["n"] = out["n"].astype("int64")
    out["_sid"] = out["_sid"].astype("int64")
    out["host"] = out["host"].astype(object)
    return out.sort_values("n").reset_index(drop=True)


def test_a_new_archiver_sees_streams_catalog_horizons_and_batches(pg):
    first = make_archiver(pg)
    first.register_stream(metrics_spec())
    first.register_stream(StreamSpec.build("events", "at", {"eid": "bigint", "kind": "text"}, kind="event"))
    first.append("metrics", 0, rows(40, step=timedelta(minutes=20)))
    first.demote(T0 + timedelta(hours=5))
    first.age()
    before = (first.streams(), first.chunks(), first.horizon("metrics"), first.status(), first.batch_ids("metrics"))
    first.close()

    second = make_archiver(pg)
    try:
        after = (second.streams(), second.chunks(), second.horizon("metrics"), second.status(),
                 second.batch_ids("metrics"))
        assert sorted(after[0], key=lambda s: s.name) == sorted(before[0], key=lambda s: s.name)
        assert after[1:3] == before[1:3]
        assert after[3]["streams"] == before[3]["streams"]
        assert after[4] == before[4] == [0]
        assert second.append("metrics", 0, rows(40)).duplicate  # the batch log survived
        assert second.register_stream(metrics_spec()) == second.stream("metrics")
        with pytest.raises(SchemaConflict, match="metrics"):
            second.register_stream(StreamSpec.build("metrics", "ts", {"host": "text"}))
        # late rows after the restart are still recognised as late (the horizon survived)
        assert second.append("metrics", 1, rows(2, start=T0 + timedelta(minutes=1), first=900)).late_rows == 2
    finally:
        second.close()


def test_present_frame_reloads_from_postgres_after_restart(pg):
    first = make_archiver(pg)
    first.register_stream(metrics_spec())
    first.append("metrics", 0, rows(10, step=timedelta(minutes=5)))
    cid = first.grid.chunk_of(T0)
    in_memory = first.present_frame("metrics", cid)
    first.append("metrics", 1, rows(2, start=T0 + timedelta(minutes=51), first=10))  # mirrored
    mirrored = first.present_frame("metrics", cid)
    first.close()
    second = make_archiver(pg)
    try:
        reloaded = second.present_frame("metrics", cid)
        db = table_rows(second)
        assert len(in_memory) == 10
        assert _frame(mirrored).equals(_frame(reloaded))
        assert _frame(reloaded).equals(_frame(db))
        assert second.present.keys() == [("metrics", cid)]
    finally:
        second.close()


def test_present_frame_follows_demotion_and_late_rows(archiver):
    archiver.append("metrics", 0, rows(10, step=timedelta(minutes=5)))
    cid = archiver.grid.chunk_of(T0)
    assert len(archiver.present_frame("metrics", cid)) == 10
    archiver.demote(T0 + timedelta(hours=1))
    assert next(c for c in archiver.chunks("metrics") if c.chunk_id == cid).tier is Tier.RECENT
    assert len(archiver.present_frame("metrics", cid)) == 10  # read from PostgreSQL
    archiver.append("metrics", 1, rows(3, start=T0 + timedelta(minutes=52), step=timedelta(minutes=1), first=10))
    got = archiver.present_frame("metrics", cid)
    assert _frame(got).equals(_frame(table_rows(archiver)))
    assert archiver.present_frame("metrics", cid + 7).empty
