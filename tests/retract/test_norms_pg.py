"""Norms of other alerts over retracted rows, on a real PostgreSQL without Spark: a
Recall over the whole ``cpu`` stream (a fleet norm) of an alert the bad rows never fed
is re-evaluated over the archive without them and revised by exactly their share; an
undo revises it back; a correction counts the new values (moirae/retract/norms.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from archive.archiver import Archiver
from archive.row_flags import flagged_template
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from moirae.config import ConfigError, load
from moirae.errors import TooBroad
from moirae.ingest.events import EventLog, EventRecord
from moirae.retract.evaluate import LineageEvaluator
from moirae.retract.service import Retractions
from recall.api import EndReason, Interval, Output, OutputKind
from recall.operator import Recall
from recall.outputs import StoredOutputs
from recall.revision_ops import apply_revision
from recall.task import plan_chunks

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
FLEET = "SELECT avg(h.cpu) AS mean, count(*) AS n, max(h.cpu) AS top FROM cpu h"


def _rows(host: str, start: int, n: int, cpu: float) -> pd.DataFrame:
    return pd.DataFrame({"ts": [T0 + timedelta(seconds=start + i * 7) for i in range(n)],
                         "host": [host] * n, "cpu": [cpu + i for i in range(n)]})


class World:
    def __init__(self, pg, max_share: float = 0.05) -> None:
        self.pg = pg
        self.arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(minutes=10)))
        self.arch.register_stream(StreamSpec.build("cpu", "ts", {"host": "text", "cpu": "double"}))
        self.frame = pd.concat([_rows("a", 0, 4, 95.0), _rows("b", 3, 4, 60.0), _rows("z", 100, 300, 10.0)])
        self.arch.append("cpu", 0, self.frame)
        self.log = EventLog(pg)
        self.results = StoredOutputs(pg)
        self.op = Recall("fleet", FLEET, store=self.arch, period=timedelta(hours=2), extrapolate=False)
        self.audit: list[tuple] = []
        self.svc = Retractions(pg, self.arch, lambda: {}, LineageEvaluator(lambda: {}), self.results,
                               None, None, audit=lambda *a: self.audit.append(a), max_share=max_share,
                               events=self.log, recalls=lambda: {"fleet": self.op}, open_events=lambda: [])
        # alert b1 of another host, an hour later: its fleet norm reads every row above
        self.log.add([EventRecord("hot", "b1", T0 + timedelta(hours=1), {"host": "b"})])
        self._first_norm("b1")

    def _first_norm(self, eid: str) -> None:
        """The norm as the Recall Manager computes it: the operator's own query, chunk by
        chunk, newest first, no flags (an independent path from the re-evaluation)."""
        op, event = self.op, self.log.get(eid).as_event()
        spec = op.task_for(event)
        state = op.start(spec)
        grid = self.arch.grid_for(spec.query.streams)
        for cid in plan_chunks(self.arch.chunk_ids(spec.query.streams), grid, spec.event_ts, spec.bound):
            op.on_chunk(state, cid, Interval(*grid.bounds(cid)), self.arch.run_history_query(spec.query, spec.params, cid))
        outs = op.on_end(state, EndReason.DONE)
        for i, (key, row) in enumerate(sorted(state.emitted.items()), start=1):
            self.results.append(Output("fleet", eid, spec.event_ts, OutputKind.INSERT, i, key, row, None))
        self.results.flush()
        assert outs or state.emitted

    def norm(self, eid: str) -> dict:
        rows: dict = {}
        for o in self.results.read(eid, "fleet"):
            apply_revision(rows, o)
        (row,) = rows.values()
        return row

    def sids(self, host: str) -> list[int]:
        f = self.arch.read("cpu", T0 - timedelta(hours=1), T0 + timedelta(hours=2), with_ids=True)
        return sorted(int(s) for s in f[f["host"] == host]["_sid"])


def _expected(frame: pd.DataFrame) -> dict:
    return {"mean": frame["cpu"].mean(), "n": len(frame), "top": frame["cpu"].max()}


def _close(row: dict, want: dict) -> None:
    assert row["n"] == want["n"]
    assert row["mean"] == pytest.approx(want["mean"], rel=1e-12)
    assert row["top"] == pytest.approx(want["top"], rel=1e-12)


def test_a_retraction_revises_the_norm_of_an_alert_it_never_fed_and_undo_restores_it(pg):
    w = World(pg)
    before = w.norm("b1")
    _close(before, _expected(w.frame))
    out = w.svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
    assert out["affected"] == 0  # the rows fed no alert ...
    assert out["norms"]["events"] == ["b1"]  # ... but b1's norm read them
    after = w.norm("b1")
    _close(after, _expected(w.frame[w.frame["host"] != "a"]))
    assert before["n"] - after["n"] == 4  # exactly the retracted rows
    assert ("ann", "norms revised", str(out["id"])) in [a[:3] for a in w.audit]
    kinds = [o.kind for o in w.results.read("b1", "fleet")]
    assert kinds[-1] is OutputKind.UPDATE  # a revision tuple, not a rewrite

    undo = w.svc.undo(out["id"], "bob")
    assert undo["norms"]["events"] == ["b1"]
    _close(w.norm("b1"), _expected(w.frame))


def test_a_correction_counts_the_new_values_and_an_unchanged_norm_is_not_revised(pg):
    w = World(pg)
    n0 = len(w.results.read("b1", "fleet"))
    out = w.svc.retract({"ids": w.sids("b")}, "b reported in percent of 200", "ann", set_values={"cpu": 1.0})
    fixed = w.frame.copy()
    fixed.loc[fixed["host"] == "b", "cpu"] = 1.0
    _close(w.norm("b1"), _expected(fixed))
    assert out["norms"]["revisions"] == 1
    # a row the norm never read (outside its two hours) changes nothing
    w.arch.append("cpu", 1, pd.DataFrame({"ts": [T0 + timedelta(hours=5)], "host": ["q"], "cpu": [1e6]}))
    late = [s for s in w.sids("q")] or [int(w.arch.read("cpu", T0 + timedelta(hours=5),
                                                        T0 + timedelta(hours=5, seconds=1), with_ids=True)["_sid"][0])]
    again = w.svc.retract({"ids": late}, "noise", "ann")
    assert again["norms"] == {"events": [], "revisions": 0}
    assert len(w.results.read("b1", "fleet")) == n0 + 1


def test_flagged_template_keeps_the_query_and_reads_through_the_flags():
    sql = flagged_template("SELECT avg(h.cpu) FROM cpu h JOIN hosts x ON x.host = h.host", ["cpu"])
    assert "moirae_flag_hidden" in sql and "JSONB_POPULATE_RECORDSET" in sql
    assert "JOIN hosts AS x" in sql  # another stream is left alone


def test_max_share_is_the_configured_key(pg):
    assert load().retract.max_share == 0.05
    with pytest.raises(ConfigError, match="retract.max_share"):
        load(overrides={"retract": {"max_share": 2}})
    strict, loose = World(pg), None
    ids = strict.sids("z")[:40]  # 40 of 308 rows: 13 %
    with pytest.raises(TooBroad, match="confirm"):
        strict.svc.retract({"ids": ids}, "x", "ann")
    assert strict.svc.list() == []  # nothing changed
    loose = Retractions(pg, strict.arch, lambda: {}, LineageEvaluator(lambda: {}), max_share=0.5)
    assert loose.retract({"ids": ids}, "x", "ann")["rows"] == 40
