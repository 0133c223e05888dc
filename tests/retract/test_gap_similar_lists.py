"""Similar-incident lists already shown follow a retraction and its undo, on a real
PostgreSQL (moirae/retract/relist.py, moirae/retract/effects.py).

Alert ``live`` was shown ``e1`` as its most similar past event. When ``e1`` is withdrawn
the list is computed again and revised: ``e1`` goes (DELETE) and the next in line,
``e3``, comes (INSERT), equal to the list of a history that never held ``e1``. The undo
brings the first list back. And after a restart (a new archive, operator and service,
the operator's statistics restored from what was saved), the undo still learns ``e1``
again and restores the list: what the retraction changed is read from the database."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive.archiver import Archiver
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from moirae.ingest.events import EventRecord
from moirae.ingest.persist import ensure_similarity_tables, load_similarity, save_similarity
from moirae.retract.service import Retractions
from recall.api import EndReason, Interval, OutputKind
from recall.similarity_recall import STATUS_KEY, SimilarityRecall
from recall.task import plan_chunks
from tests.retract.test_service_pg import T0, World, _rows

pytestmark = pytest.mark.postgres

CONTEXTS = {
    "e1": [{"user": "backup", "proc": "miner"}, {"user": "backup", "proc": "rsync"}],
    "e2": [{"user": "ci", "proc": "make"}],
    "e3": [{"user": "backup", "proc": "rsync"}, {"user": "ops", "proc": "tar"}],
    "live": [{"user": "backup", "proc": "miner"}, {"user": "backup", "proc": "rsync"}],
}
HOSTS = {"e1": "a", "e2": "b", "e3": "c", "live": "d"}
MINUTE = {"e1": 1, "e2": 2, "e3": 3, "live": 30}
_MADE: list[SimilarityRecall] = []


@pytest.fixture(autouse=True)
def _closed():
    """Each operator's chunk source listens to the archive's index invalidations: closed after."""
    yield
    while _MADE:
        _MADE.pop().source.close()


def _op(arch: Archiver) -> SimilarityRecall:
    op = SimilarityRecall("similar", event="hot", store=arch, event_stream="ev_hot", context_streams=["cx_hot_c"],
                          k=1, feedback_period=None)
    _MADE.append(op)
    return op


def _world(pg) -> World:
    w = World(pg)
    w.arch.register_stream(StreamSpec.build("cx_hot_c", "ts", {"eid": "text", "user": "text", "proc": "text"}))
    w.arch.append("cpu", 1, pd.concat([_rows("c", 20, 3), _rows("d", 40, 3)]))
    real_add = w.log.add
    w.log.add = lambda recs: real_add([EventRecord(r.event, r.eid, r.ts, r.attrs, context=CONTEXTS[r.eid])
                                       for r in recs])
    for i, eid in enumerate(CONTEXTS):
        w.alert(eid, HOSTS[eid], MINUTE[eid] * 60)
        ts = T0 + timedelta(seconds=MINUTE[eid] * 60)
        w.arch.append("cx_hot_c", 10 + i, pd.DataFrame([{"ts": ts, "eid": eid, **c} for c in CONTEXTS[eid]]))
    return w


def _learned(op: SimilarityRecall, w: World) -> SimilarityRecall:
    for eid in CONTEXTS:
        op.learn_event(eid, w.log.get(eid).context)
    return op


def _show(w: World, op: SimilarityRecall, eid: str) -> None:
    """The list as a Recall Manager task computes and stores it (every output, in order)."""
    spec = op.task_for(w.log.get(eid).as_event())
    state = op.start(spec)
    grid = op.store.grid_for(spec.query.streams)
    outs = []
    for cid in plan_chunks(op.store.chunk_ids(spec.query.streams), grid, spec.event_ts, spec.bound):
        outs += op.on_chunk(state, cid, Interval(*grid.bounds(cid)), op.fetch_chunk(state, cid))
    outs += op.on_end(state, EndReason.DONE)
    for o in outs:
        w.results.append(o)
    w.results.flush()


def _shown(w: World, eid: str) -> dict:
    return {k: v for k, v in w.current(eid).items() if k != STATUS_KEY}


def _svc(w: World, arch: Archiver, op: SimilarityRecall) -> Retractions:
    return Retractions(w.pg, arch, lambda: w.graphs, w.svc.evaluator, w.results, None, w.incidents,
                       events=w.log, similarity=lambda: {"hot": [op]}, audit=lambda *a: w.audit.append(a))


def test_a_list_that_showed_a_withdrawn_alert_is_recomputed_and_undo_brings_it_back(pg):
    w = _world(pg)
    try:
        op = _learned(_op(w.arch), w)
        _show(w, op, "live")
        first = _shown(w, "live")
        assert [r["past_eid"] for r in first.values()] == ["e1"]
        svc = _svc(w, w.arch, op)

        out = svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
        assert out["retracted"] == ["e1"]
        assert out["changes"]["relisted"]["events"] == ["live"]
        assert ("ann", "similar lists revised", str(out["id"])) in [a[:3] for a in w.audit]
        now = _shown(w, "live")
        assert [r["past_eid"] for r in now.values()] == ["e3"]  # the next in line took its place
        kinds = [o.kind for o in w.results.read("live", "similar")][-2:]
        assert set(kinds) == {OutputKind.DELETE, OutputKind.INSERT}  # revision tuples, not a rewrite

        # equal to the list of a history that never held e1 (its row is out of the event stream)
        never = _op(w.arch)
        for eid in ("e2", "e3", "live"):
            never.learn_event(eid, w.log.get(eid).context)
        spec = never.task_for(w.log.get("live").as_event())
        state = never.start(spec)
        grid = w.arch.grid_for(spec.query.streams)
        for cid in plan_chunks(w.arch.chunk_ids(spec.query.streams), grid, spec.event_ts, spec.bound):
            never.on_chunk(state, cid, Interval(*grid.bounds(cid)), never.fetch_chunk(state, cid))
        (clean,) = state.rows.values()
        (row,) = now.values()
        assert row["score"] == pytest.approx(clean["score"], rel=1e-9) and row["incident"] == clean["incident"]

        back = svc.undo(out["id"], "bob")
        assert back["restored"] == ["e1"] and back["changes"]["relisted"]["events"] == ["live"]
        again = _shown(w, "live")
        assert again.keys() == first.keys()
        assert again["e1"]["score"] == pytest.approx(first["e1"]["score"], rel=1e-9)
    finally:
        w.close()


def test_an_undo_after_a_restart_relearns_and_restores_the_lists(pg):
    w = _world(pg)
    try:
        op = _learned(_op(w.arch), w)
        ensure_similarity_tables(pg)
        save_similarity(pg, op.name, *op.state_delta())  # a maintenance round before the retraction
        _show(w, op, "live")
        first = _shown(w, "live")
        out = _svc(w, w.arch, op).retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
        assert out["retracted"] == ["e1"]
        save_similarity(pg, op.name, *op.state_delta())  # and one after it

        # a restart: a new archive, a new operator restored from what was saved, a new service
        arch2 = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
        op2 = _op(arch2)
        assert op2.restore(load_similarity(pg, op2.name))
        assert op2.stats.events == 3 and op2.stats.doc_freq("proc=miner") == 1  # e1 forgotten, live kept
        back = _svc(w, arch2, op2).undo(out["id"], "bob")
        assert back["restored"] == ["e1"] and back["changes"]["stats_relearned"] == 1
        assert op2.stats.events == 4 and op2.stats.doc_freq("proc=miner") == 2
        again = _shown(w, "live")
        assert again.keys() == first.keys()
        assert again["e1"]["score"] == pytest.approx(first["e1"]["score"], rel=1e-9)
        arch2.close()
    finally:
        w.close()
