"""Similarity Recall results at incident level: a past incident of many
windows is one result, its resolution is found from any window, the live incident is
never a result, explanations split the cosine exactly, novelty is reported.

The operator is driven chunk by chunk, newest first, with the long-form rows its
history-query returns ``(eid, ts, attr, value, part)``, exactly as the Recall Manager
hands them over. The store below only describes stream columns and keeps SQL text
(neither is under test); scoring, grouping and revisions are the real code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from recall.api import EndReason, Interval, OutputKind
from recall.similarity_recall import STATUS_KEY, SimilarityRecall
from similarity import ContextStatistics, NumericSpec, SimilarityConfig, cosine
from similarity.explain import explain
from similarity.incidents import IncidentRule, group
from similarity.novelty import NoveltyCalibrator

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W = timedelta(minutes=5)


class _Columns:
    """The two things the operator asks of a store when it is built."""

    grid = None

    def prepare(self, sql):
        return sql

    def index_store(self, operator):
        return None  # nothing persisted (archive.abc.ChunkStore.index_store)

    def chunks(self, stream=None, tier=None):
        return []  # no archived chunk: the search covers the whole archive

    def stream(self, name):
        return SimpleNamespace(columns=["eid", "ts", "user", "proc"] if name.startswith("cx") else
                               ["eid", "ts", "resolution"])


def _op(**kw):
    kw.setdefault("incidents", IncidentRule(("sid",), W))
    return SimilarityRecall("similar", event="overload", store=_Columns(), context_streams=["cx_users"],
                            surrounding_streams=["cx_resolution"], k=3, feedback_period=None, **kw)


def _rows(events):
    """Long-form rows of past events ``(eid, minutes after T0, sid, context, resolution)``."""
    out = []
    for eid, minute, sid, ctx, res in events:
        ts = T0 + timedelta(minutes=minute)
        out.append((eid, ts, None, sid, "event"))
        for c in ctx:
            for a, v in c.items():
                out.append((eid, ts, a, v, "context:cx_users"))
        if res is not None:
            out.append((eid, ts, "resolution", res, "surrounding:cx_resolution"))
    return pd.DataFrame(out, columns=["eid", "ts", "attr", "value", "part"])


def _run(op, event, chunks):
    """Learn everything, start the task, feed ``chunks`` (newest first); return outputs."""
    for ev in [e for c in chunks for e in c]:
        op.learn_event(ev[0], ev[3])
    op.learn_event(event["eid"], event["context"])
    spec = op.task_for(event)
    state = op.start(spec)
    outs = []
    for i, chunk in enumerate(chunks):
        outs += op.on_chunk(state, 100 - i, Interval(T0, T0 + timedelta(days=1)), _rows(chunk))
    outs += op.on_end(state, EndReason.DONE)
    return state, outs


def _held(outs):
    held = {}
    for o in outs:
        if o.key == STATUS_KEY:
            continue
        if o.kind is OutputKind.INSERT:
            assert o.key not in held, f"INSERT of {o.key} while held"
            held[o.key] = o.row
        else:
            held.pop(o.key)
    return held


BACKUP = [{"user": "backup"}, {"proc": "rsync"}]
DEPLOY = [{"user": "ci"}, {"proc": "make"}]
LIVE = {"eid": "live", "ts": T0 + timedelta(days=1), "sid": "s1", "context": BACKUP}


BACKGROUND = [(f"bg{i}", 600 + 60 * i, f"s{5 + i}", DEPLOY if i % 2 else [{"user": "ci"}, {"proc": "rsync"}], None)
              for i in range(6)]


def _incident(prefix, start_min, sid, ctx, n=6, resolution_at=None):
    return [(f"{prefix}{i}", start_min + 5 * i, sid, ctx, "restarted rsync" if i == resolution_at else None)
            for i in range(n)]


def test_past_incident_of_six_windows_appears_once_across_a_chunk_boundary():
    inc = _incident("a", 0, "s2", BACKUP)  # windows at 0..25 min, split over two chunks
    other = [("b0", 200, "s3", DEPLOY, None), ("c0", 300, "s4", [{"user": "backup"}], None)]
    state, outs = _run(_op(), LIVE, [other + inc[3:], inc[:3]])
    held = _held(outs)
    assert "a0" in held and not any(k.startswith("a") and k != "a0" for k in held)
    assert held["a0"]["windows"] == 6
    assert all(r["context"] for r in held.values())  # re-emitted after the merge with its best window's context
    assert [r["incident"] for r in sorted(held.values(), key=lambda r: -r["score"])][0] == "a0"
    # the newer part was held as a3 and retracted when the older chunk merged it
    assert any(o.kind is OutputKind.DELETE and o.key == "a3" for o in outs)
    assert [p.id for p in state.incidents.held][0] == "a0"


@pytest.mark.parametrize("window_with_resolution", range(6))
def test_resolution_is_found_from_any_window(window_with_resolution):
    inc = _incident("a", 0, "s2", BACKUP, resolution_at=window_with_resolution)
    _, outs = _run(_op(), LIVE, [BACKGROUND + inc[3:], inc[:3]])
    assert _held(outs)["a0"]["resolution"] == "restarted rsync"


def test_resolution_recorded_in_the_incident_store_is_used():
    inc = _incident("a", 0, "s2", BACKUP)
    asked = []

    def recorded(ids):
        asked.append(list(ids))
        return {"a0": "noted by on-call"} if "a0" in ids else {}

    _, outs = _run(_op(resolutions=recorded), LIVE, [BACKGROUND + inc])
    assert _held(outs)["a0"]["resolution"] == "noted by on-call" and asked


def test_live_incident_is_excluded():
    ongoing = _incident("l", 24 * 60 - 30, "s1", BACKUP)  # s1's windows chaining up to the live event
    older = _incident("a", 0, "s1", BACKUP, n=2)  # same server, long before
    state, outs = _run(_op(), LIVE, [BACKGROUND + ongoing, older])
    held = _held(outs)
    assert not any(k.startswith("l") for k in held), held
    assert "a0" in held
    assert state.incidents.live_incident == "l0"
    status = [o.row for o in outs if o.key == STATUS_KEY][-1]
    assert status["live_incident"] == "l0"


def test_incident_level_top_k_equals_brute_force_over_random_chunks():
    rng = np.random.default_rng(7)
    events, users = [], ["u1", "u2", "u3", "backup", "ci"]
    minute = 0
    for i in range(120):
        minute += int(rng.choice([5, 5, 5, 10, 15, 60]))
        events.append((f"e{i:03d}", minute, f"s{rng.integers(4)}",
                       [{"user": str(rng.choice(users))}, {"proc": str(rng.choice(["p1", "p2", "p3"]))}], None))
    live = {"eid": "live", "ts": T0 + timedelta(minutes=minute + 5), "sid": "s0", "context": BACKUP}
    chunks = [events[i:i + 17] for i in range(0, len(events), 17)][::-1]
    op = _op()
    state, outs = _run(op, live, chunks)
    held = _held(outs)
    # brute force: group everything (with the live event), drop the live incident, best window per incident
    eids = [e[0] for e in events] + ["live"]
    ts = [np.datetime64((T0 + timedelta(minutes=e[1])).replace(tzinfo=None), "ns") for e in events]
    ts.append(np.datetime64(live["ts"].replace(tzinfo=None), "ns"))
    ids = group([e[2] for e in events] + ["s0"], ts, eids, IncidentRule(("sid",), W))
    table = state.scorer.table
    best = {}
    for (eid, minute_, _, ctx, _), iid in zip(events, ids[:-1], strict=True):
        if iid == ids[-1]:
            continue
        s = cosine(table.bag(BACKUP), table.bag(ctx), table)
        cand = (-s, -minute_, eid)
        if s > 0 and (iid not in best or cand < best[iid][0]):
            best[iid] = (cand, s)
    want = sorted(best, key=lambda i: (best[i][0][0], best[i][0][1], i))[:3]
    got = sorted(held, key=lambda i: (-held[i]["score"], held[i]["past_ts"][::-1], i))
    assert set(got) == set(want)
    assert len(state.incidents.frontier) <= 4  # only incidents an older chunk could still extend
    for i in want:
        assert held[i]["score"] == pytest.approx(best[i][1], abs=1e-12)


def test_explanation_shares_sum_to_the_cosine():
    s = ContextStatistics(SimilarityConfig(numeric={"load": NumericSpec()}))
    rng = np.random.default_rng(3)
    ctxs = [[{"user": f"u{rng.integers(5)}"}, {"proc": f"p{rng.integers(4)}"}, {"load": float(rng.random())}]
            for _ in range(60)]
    s.learn_many(ctxs)
    t = s.table()
    checked = 0
    for a, b in zip(ctxs[:30], ctxs[30:], strict=True):
        e = explain(t, a, b)
        assert abs(sum(x.share for x in e.terms) - cosine(t.bag(a), t.bag(b), t)) < 1e-9
        assert sum(x.share for x in e.top(5)) <= 1.0 + 1e-12
        checked += bool(e.terms)
        for x in e.terms:
            if x.kernel is not None:
                assert x.term == "load" and x.value is not None and x.past_value is not None and 0 < x.kernel <= 1
    assert checked > 10


def test_results_carry_explanations_and_novelty_status():
    op = _op(novelty=NoveltyCalibrator(fixed=0.99))
    _, outs = _run(op, LIVE, [BACKGROUND + _incident("a", 0, "s2", [{"user": "backup"}, {"proc": "tar"}], n=2)])
    held = _held(outs)
    row = max(held.values(), key=lambda r: r["score"])
    assert row["shared_terms"] and {t["term"] for t in row["shared_terms"]} <= {"user=backup", "proc=rsync"}
    assert abs(sum(t["share"] for t in row["shared_terms"]) - row["score"]) < 1e-5  # shares rounded to 6 digits
    status = [o.row for o in outs if o.key == STATUS_KEY][-1]
    assert status["status"] == "novel" and status["novel"] is True and status["end"] == "done"
    _, outs = _run(_op(novelty=NoveltyCalibrator(fixed=0.01)), LIVE, [BACKGROUND + _incident("a", 0, "s2", BACKUP)])
    assert [o.row for o in outs if o.key == STATUS_KEY][-1]["novel"] is False


def test_a_search_pausing_for_feedback_says_what_it_knows_and_the_end_replaces_it():
    op = SimilarityRecall("similar", event="overload", store=_Columns(), context_streams=["cx_users"],
                          surrounding_streams=["cx_resolution"], k=3, feedback_period=1,
                          incidents=IncidentRule(("sid",), W), novelty=NoveltyCalibrator(fixed=0.99))
    _, outs = _run(op, LIVE, [BACKGROUND, _incident("a", 0, "s2", BACKUP)])
    status = [(o.kind, o.row["status"]) for o in outs if o.key == STATUS_KEY]
    assert status == [(OutputKind.INSERT, "partial"), (OutputKind.DELETE, "partial"), (OutputKind.INSERT, "partial"),
                      (OutputKind.DELETE, "partial"), (OutputKind.INSERT, "done")]
    rows = [o.row for o in outs if o.key == STATUS_KEY]
    assert rows[0]["novel"] is True and rows[-1]["novel"] is False  # nothing alike in the first chunk, a twin later


def test_without_a_rule_every_past_event_is_its_own_incident_and_memory_stays_bounded():
    events = [(f"e{i:03d}", 5 * i, "s1", BACKUP if i % 7 == 0 else DEPLOY, None) for i in range(90)]
    op = _op(incidents=None)
    state, outs = _run(op, LIVE, [events[i:i + 10] for i in range(0, 90, 10)][::-1])
    held = _held(outs)
    assert len(held) == 3 and all(r["windows"] == 1 for r in held.values())
    assert len(state.incidents.frontier) <= 1
