"""The recall-operator contract (:mod:`recall.abc`), generated for every recall operator.

Each entry of :data:`CASES` is one operator spec with an event and the chunks its task
reads, newest first, as the Recall Manager hands them over (the rows its history-query
returns for each chunk). Every test runs over every case:

- the spec is frozen and builds logic that keeps it (``op.spec``);
- determinism: two builds fed the same chunks give the same outputs;
- newest-first order: ``seq`` increases per (operator, event), and the history an
  output is computed from only grows backwards in time (its end never moves);
- snapshot round-trip with its version (for operators that snapshot), and a snapshot
  of another version is refused.

A new recall operator joins by adding a case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from recall.abc import ChunkFetcher, OperatorSpec, RecallOperator, Snapshotting
from recall.api import EndReason, Interval, Output, OutputKind
from recall.specs import RecallSpec, SimilarityRecallSpec
from similarity.incidents import IncidentRule

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def day(d: int) -> Interval:
    return Interval(T0 + d * DAY, T0 + (d + 1) * DAY)


class _Columns:
    """What Similarity Recall asks of a store when it is built (stream columns, SQL)."""

    grid = None

    def prepare(self, sql):
        return sql

    def stream(self, name):
        return SimpleNamespace(columns=["eid", "ts", "user", "proc"] if name.startswith("cx") else
                               ["eid", "ts", "resolution"])

    def chunks(self):
        return []

    def index_store(self, name):
        return None


@dataclass(frozen=True)
class Case:
    """An operator spec, the store to build it on, an event, and its task's chunks
    ``(chunk_id, covered, rows)`` newest first; ``learn`` primes learned state."""

    spec: OperatorSpec
    event: dict[str, Any]
    chunks: tuple[tuple[int, Interval, pd.DataFrame], ...]
    store: Callable[[], Any] = lambda: None
    learn: Callable[[Any], None] = lambda op: None


def _recall_grouped() -> Case:
    spec = RecallSpec("grouped", "SELECT h.sid, count(*) AS n, sum(h.x) AS s FROM m h GROUP BY h.sid",
                      period=7 * DAY)
    chunks = tuple((6 - d, day(6 - d), pd.DataFrame({"g0": ["a", "b"][: 1 + d % 2], "a0_n": [d + 1, 2][: 1 + d % 2],
                                                      "a1_sum": [10.0 * d, 3.0][: 1 + d % 2],
                                                      "a1_n": [d + 1, 2][: 1 + d % 2]}))
                   for d in range(4))
    return Case(spec, {"eid": "e1", "ts": T0 + 7 * DAY}, chunks)


def _recall_having() -> Case:
    spec = RecallSpec("having", "SELECT h.sid, count(*) AS n FROM m h GROUP BY h.sid HAVING h.sid = e.sid",
                      feedback_period=None)
    chunks = tuple((9 - d, day(9 - d), pd.DataFrame({"g0": ["s1", "s2"], "a0_n": [d, 1]})) for d in range(3))
    return Case(spec, {"eid": "e2", "ts": T0 + 10 * DAY, "sid": "s1"}, chunks)


def _recall_rows() -> Case:
    spec = RecallSpec("rows", "SELECT h.sid, h.x FROM m h WHERE h.sid = :sid")
    chunks = tuple((5 - d, day(5 - d), pd.DataFrame({"sid": ["s1"] * (d + 1), "x": list(range(d + 1))}))
                   for d in range(3))
    return Case(spec, {"eid": "e3", "ts": T0 + 6 * DAY, "sid": "s1"}, chunks)


def _similarity() -> Case:
    spec = SimilarityRecallSpec("similar", "overload", ("cx_users",), k=2, surrounding_streams=("cx_resolution",),
                                feedback_period=None, incidents=IncidentRule(("sid",), timedelta(minutes=5)),
                                persist_index=False)
    past = [("p1", 0, "s1", [{"user": "ann", "proc": "java"}], "restart"),
            ("p2", 60, "s2", [{"user": "bob", "proc": "java"}], None),
            ("p3", 24 * 60, "s3", [{"user": "ann", "proc": "cc"}], "kill"),
            ("p4", 25 * 60, "s1", [{"user": "cat", "proc": "sh"}], None)]

    def rows(events):
        out = []
        for eid, minute, sid, ctx, res in events:
            ts = T0 + timedelta(minutes=minute)
            out.append((eid, ts, None, sid, "event"))
            out += [(eid, ts, a, v, "context:cx_users") for c in ctx for a, v in c.items()]
            if res is not None:
                out.append((eid, ts, "resolution", res, "surrounding:cx_resolution"))
        return pd.DataFrame(out, columns=["eid", "ts", "attr", "value", "part"])

    event = {"eid": "now", "ts": T0 + 3 * DAY, "sid": "s9", "context": [{"user": "ann", "proc": "java"}]}

    def learn(op):
        for eid, _, _, ctx, _ in past:
            op.learn_event(eid, ctx)
        op.learn_event(event["eid"], event["context"])

    chunks = ((1, day(1), rows(past[2:])), (0, day(0), rows(past[:2])))
    return Case(spec, event, chunks, store=_Columns, learn=learn)


CASES = {"recall-grouped": _recall_grouped, "recall-having": _recall_having, "recall-rows": _recall_rows,
         "similarity-recall": _similarity}


@pytest.fixture(params=sorted(CASES))
def case(request) -> Case:
    return CASES[request.param]()


def build(case: Case) -> RecallOperator:
    op = case.spec.build(case.store())
    case.learn(op)
    return op


def run(case: Case, op: RecallOperator | None = None) -> list[Output]:
    """One task of the case's event through ``op`` (a fresh build by default)."""
    op = op or build(case)
    state = op.start(op.task_for(case.event))
    out: list[Output] = []
    for chunk_id, covered, rows in case.chunks:
        out += op.on_chunk(state, chunk_id, covered, rows)
    out += op.on_end(state, EndReason.DONE)
    return out


def test_spec_is_frozen_and_built_logic_keeps_it(case):
    assert isinstance(case.spec, OperatorSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.spec.name = "other"  # type: ignore[misc]
    op = build(case)
    assert isinstance(op, RecallOperator) and op.name == case.spec.name
    assert op.spec == case.spec and hash(op.spec) == hash(case.spec)


def test_same_chunks_give_the_same_outputs(case):
    first, second = run(case), run(case)
    assert first, "a conformance case must produce outputs"
    assert first == second


def test_one_operator_gives_the_same_outputs_to_two_tasks(case):
    op = build(case)
    assert run(case, op) == run(case, op)


def test_outputs_follow_newest_first_chunks(case):
    outs = run(case)
    seqs = [o.seq for o in outs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {(o.operator, o.eid) for o in outs} == {(case.spec.name, case.event["eid"])}
    assert all(o.kind is not OutputKind.BOUNDARY for o in outs)  # the manager's, not the operator's
    covered = [o.covered for o in outs if o.covered is not None]
    assert covered
    assert all(b.start <= a.start and b.end == a.end for a, b in zip(covered, covered[1:], strict=False))
    newest = case.chunks[0][1]
    assert covered[0].end <= newest.end


def test_chunk_ids_arrive_newest_first_in_the_cases():
    for make in CASES.values():
        ids = [c[0] for c in make().chunks]
        assert ids == sorted(ids, reverse=True)


def test_snapshot_round_trips_with_its_version(case):
    op = build(case)
    if not isinstance(op, Snapshotting):
        pytest.skip(f"{type(op).__name__} keeps no state across tasks")
    snap = op.snapshot()
    versions = {k: v["version"] for k, v in snap.items() if isinstance(v, dict) and "version" in v}
    assert versions, "a snapshot names its version"
    fresh = case.spec.build(case.store())
    assert fresh.restore(snap) is True
    assert _comparable(fresh.snapshot()) == _comparable(snap)
    assert run(case, fresh) == run(case, op)
    for key in versions:
        stale = {**snap, key: {**snap[key], "version": -1}}
        assert case.spec.build(case.store()).restore(stale) is False


def test_chunk_fetchers_are_declared(case):
    op = build(case)
    assert isinstance(op, ChunkFetcher) == hasattr(type(op), "fetch_chunk")


def _comparable(snap: dict) -> dict:
    """A snapshot with its learned ids (hashes, not comparable as such) as their count."""
    return {k: (len(v) if k == "learned" else v) for k, v in snap.items()}


def test_every_operator_spec_has_a_case():
    """A spec listed in :mod:`recall.specs` without a case here fails this test."""
    import inspect

    import recall.specs

    specs = {cls for name, cls in inspect.getmembers(recall.specs, inspect.isclass)
             if name in recall.specs.__all__ and dataclasses.is_dataclass(cls)
             and "name" in {f.name for f in dataclasses.fields(cls)} and hasattr(cls, "build")}
    assert specs == {RecallSpec, SimilarityRecallSpec}
    assert specs == {type(make().spec) for make in CASES.values()}
