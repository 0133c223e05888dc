"""A retracted alert leaves the similarity statistics (M 3.5): after
``SimilarityRecall.forget_event`` (what :class:`moirae.retract.effects.Effects` calls for
each alert it withdraws) and with its row gone from the history (its index entry
removed), another alert's similar-incident list equals the one computed as if the
retracted event had never existed: same incidents, same scores, same explanations. And
with a real PostgreSQL, a retraction through the service forgets the alert in its
event-query's Similarity Recall and the undo learns it again.

The operator is driven chunk by chunk with the long-form rows its history-query returns
(as in tests/recall/test_similarity_results.py); the statistics, scoring and grouping are
the real code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pandas as pd
import pytest

from recall.api import EndReason, Interval, OutputKind
from recall.similarity_recall import STATUS_KEY, SimilarityRecall
from similarity.errors import NotLearned
from similarity.incidents import IncidentRule

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W = timedelta(minutes=5)


class _Columns:
    grid = None

    def prepare(self, sql):
        return sql

    def index_store(self, operator):
        return None

    def chunks(self, stream=None, tier=None):
        return []

    def stream(self, name):
        return SimpleNamespace(columns=["eid", "ts", "user", "proc"] if name.startswith("cx") else ["eid", "ts"])


_MADE: list[SimilarityRecall] = []


@pytest.fixture(autouse=True)
def _closed():
    """Each operator's chunk source listens to the archive's index invalidations
    (process-wide): closed after the test, so no later engine in the session calls it."""
    yield
    while _MADE:
        _MADE.pop().source.close()


def _op():
    op = SimilarityRecall("similar", event="overload", store=_Columns(), context_streams=["cx_users"], k=3,
                          feedback_period=None, incidents=IncidentRule(("sid",), W))
    _MADE.append(op)
    return op


def _rows(events):
    out = []
    for eid, minute, sid, ctx in events:
        ts = T0 + timedelta(minutes=minute)
        out.append((eid, ts, None, sid, "event"))
        for c in ctx:
            for a, v in c.items():
                out.append((eid, ts, a, v, "context:cx_users"))
    return pd.DataFrame(out, columns=["eid", "ts", "attr", "value", "part"])


def _list(op, event, history):
    """The similar-incident list of ``event`` over ``history`` (one chunk), as held at the end."""
    spec = op.task_for(event)
    state = op.start(spec)
    outs = op.on_chunk(state, 1, Interval(T0, T0 + timedelta(days=1)), _rows(history))
    outs += op.on_end(state, EndReason.DONE)
    held = {}
    for o in outs:
        if o.key == STATUS_KEY:
            continue
        if o.kind is OutputKind.DELETE:
            held.pop(o.key)
        else:
            held[o.key] = dict(o.row)
    return held


BAD = ("x0", 50, "s9", [{"user": "backup"}, {"proc": "miner"}, {"proc": "rsync"}])
PAST = [(f"p{i}", 100 + 30 * i, f"s{i}", [{"user": "backup" if i % 2 else "ci"}, {"proc": "rsync" if i % 3 else "make"}])
        for i in range(8)]
LIVE = {"eid": "live", "ts": T0 + timedelta(days=1), "sid": "s1",
        "context": [{"user": "backup"}, {"proc": "rsync"}]}


def test_similar_list_after_forgetting_equals_the_list_without_the_event():
    with_bad = _op()
    for eid, _, _, ctx in [BAD, *PAST]:
        with_bad.learn_event(eid, ctx)
    with_bad.learn_event(LIVE["eid"], LIVE["context"])
    stale = _list(with_bad, LIVE, PAST)  # its row gone, but its terms still counted
    assert with_bad.forget_event("x0", BAD[3]) is True
    assert with_bad.forget_event("x0", BAD[3]) is False  # once
    forgot = _list(with_bad, LIVE, PAST)

    never = _op()
    for eid, _, _, ctx in PAST:
        never.learn_event(eid, ctx)
    never.learn_event(LIVE["eid"], LIVE["context"])
    clean = _list(never, LIVE, PAST)

    assert forgot == clean  # incidents, scores, explanations
    assert with_bad.stats.events == never.stats.events and with_bad.stats.doc_freq("proc=miner") == 0
    assert all(with_bad.stats.doc_freq(t) == never.stats.doc_freq(t) for t in ("user=backup", "proc=rsync", "user=ci"))
    assert stale != clean  # the statistics did count it (so the test can tell)
    # and learning it again (an undo) gives back the first statistics
    assert with_bad.learn_event("x0", BAD[3])
    assert _list(with_bad, LIVE, PAST) == stale


def test_forgetting_a_context_never_learned_changes_nothing():
    op = _op()
    op.learn_event("p0", PAST[0][3])
    before = op.stats.snapshot()
    with pytest.raises(NotLearned):
        op.forget_event("p0", [{"user": "nobody"}])
    assert op.stats.snapshot() == before and "p0" in op._learned


@pytest.mark.postgres
def test_a_retraction_forgets_the_alert_in_its_similarity_recall_and_undo_relearns_it(pg):
    from moirae.ingest.events import EventRecord
    from moirae.retract.service import Retractions
    from tests.retract.test_service_pg import World

    w = World(pg)
    ctx = {"e1": [{"user": "backup"}, {"proc": "miner"}], "e2": [{"user": "ci"}, {"proc": "make"}]}
    real_add = w.log.add
    w.log.add = lambda recs: real_add([EventRecord(r.event, r.eid, r.ts, r.attrs, context=ctx[r.eid]) for r in recs])
    w.alert("e1", "a", 2)
    w.alert("e2", "b", 5)
    op = _op()
    for eid in ("e1", "e2"):
        op.learn_event(eid, w.log.get(eid).context)
    svc = Retractions(pg, w.arch, lambda: w.graphs, w.svc.evaluator, w.results, None, w.incidents,
                      events=w.log, similarity=lambda: {"hot": [op]})
    try:
        out = svc.retract({"ids": w.sids("a")}, "a's sensor was stuck", "ann")
        assert out["retracted"] == ["e1"] and out["changes"]["stats_forgotten"] == 1
        assert op.stats.events == 1 and op.stats.doc_freq("proc=miner") == 0 and "e1" not in op._learned
        back = svc.undo(out["id"], "bob")
        assert back["restored"] == ["e1"] and back["changes"]["stats_relearned"] == 1
        assert op.stats.events == 2 and op.stats.doc_freq("proc=miner") == 1
    finally:
        w.close()
