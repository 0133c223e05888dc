"""A Recall run after a retraction reads the archive as the flags say it is, on a real
PostgreSQL: the history-query of an alert raised after the retraction (the Recall
Manager's path, ``Archiver.run_history_query`` with no flags given) leaves out the
removed rows and reads the corrected ones' new values, as the re-evaluation of stored
norms does (moirae/retract/norms.py); an undo makes the rows count again. A stream
without active flags runs its template as written (archive/row_flags.py)."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive.row_flags import flagged
from moirae.ingest.events import EventRecord
from moirae.retract.flagged import ArchiveFlags
from recall.api import EndReason, Interval
from recall.task import plan_chunks
from tests.retract.test_norms_pg import T0, World, _close, _expected

pytestmark = pytest.mark.postgres


class CountingFlags(ArchiveFlags):
    """The engine's flags, counting how often a chunk's flags are read."""

    def __init__(self, db) -> None:
        super().__init__(db)
        self.reads = 0

    def chunk_flags(self, stream, lo, hi):
        self.reads += 1
        return super().chunk_flags(stream, lo, hi)


def _live_norm(w: World, eid: str) -> dict:
    """The norm the Recall Manager computes for a new alert: the operator's own
    history-query, chunk by chunk, newest first, through the archive as it is."""
    op, event = w.op, w.log.get(eid).as_event()
    spec = op.task_for(event)
    state = op.start(spec)
    grid = w.arch.grid_for(spec.query.streams)
    for cid in plan_chunks(w.arch.chunk_ids(spec.query.streams), grid, spec.event_ts, spec.bound):
        op.on_chunk(state, cid, Interval(*grid.bounds(cid)), w.arch.run_history_query(spec.query, spec.params, cid))
    op.on_end(state, EndReason.DONE)
    (row,) = state.emitted.values()
    return row


def _alert(w: World, eid: str, minutes: int) -> None:
    w.log.add([EventRecord("hot", eid, T0 + timedelta(hours=1, minutes=minutes), {"host": "z"})])


def test_a_new_alerts_recall_leaves_out_retracted_rows_and_reads_corrected_ones(pg):
    w = World(pg)
    flags = CountingFlags(pg)
    w.arch.row_flags = flags  # as the engine sets it
    _alert(w, "c0", 1)
    _close(_live_norm(w, "c0"), _expected(w.frame))
    assert flags.reads == 0  # no retraction: the template ran as written

    out = w.svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
    assert flagged(flags, ["cpu"]) == ["cpu"]  # the cache was invalidated by the retraction
    _alert(w, "c1", 2)
    _close(_live_norm(w, "c1"), _expected(w.frame[w.frame["host"] != "a"]))
    assert flags.reads > 0

    fix = w.svc.retract({"ids": w.sids("b")}, "b reported in percent of 200", "ann", set_values={"cpu": 1.0})
    fixed = w.frame[w.frame["host"] != "a"].copy()
    fixed.loc[fixed["host"] == "b", "cpu"] = 1.0
    _alert(w, "c2", 3)
    _close(_live_norm(w, "c2"), _expected(fixed))

    w.svc.undo(out["id"], "bob")
    w.svc.undo(fix["id"], "bob")
    assert flagged(flags, ["cpu"]) == []
    reads = flags.reads
    _alert(w, "c3", 4)
    _close(_live_norm(w, "c3"), _expected(w.frame))
    assert flags.reads == reads  # no flags left: as written again


def test_the_flags_are_read_from_the_database_after_a_restart(pg):
    w = World(pg)
    w.svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
    w.arch.row_flags = ArchiveFlags(pg)  # a new process: nothing cached, the flags are in the database
    _alert(w, "c1", 2)
    _close(_live_norm(w, "c1"), _expected(w.frame[w.frame["host"] != "a"]))


def test_a_flagged_history_query_is_still_one_read_only_select(pg):
    w = World(pg)
    w.svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
    spec = w.op.task_for({"eid": "x", "ts": T0 + timedelta(hours=1), "host": "z"})
    cid = w.arch.chunk_ids(["cpu"])[-1]
    rows = w.arch.run_history_query(spec.query, spec.params, cid)
    assert isinstance(rows, pd.DataFrame)
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM cpu")
        assert cur.fetchone()[0] == len(w.frame)  # flagged, never deleted


def test_a_row_both_removed_and_corrected_stays_out(pg):
    w = World(pg)
    w.arch.row_flags = ArchiveFlags(pg)
    w.svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
    w.svc.retract({"ids": w.sids("a")}, "and its values were off", "ann", set_values={"cpu": 1.0})
    _alert(w, "c1", 2)
    _close(_live_norm(w, "c1"), _expected(w.frame[w.frame["host"] != "a"]))
