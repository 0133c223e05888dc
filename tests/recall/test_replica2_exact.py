"""Replica2 is exact (recall.replica2): a Similarity Recall task over a partly
materialized archive, which migrates onto the raw history when its materialized chunks
run out, ends with the same top-k as the same task over the fully materialized archive.

Real PostgreSQL, the real Recall Manager, worker pool and Similarity Recall (chunk
indexes built and persisted). The raw history is a table of ``(ts, sid, user)`` rows;
the event-query of this test is the identity (every raw row is an event, its ``user``
its context), so re-processing a unit copies its raw rows into the event and context
streams (:class:`_CopyReplica`, the test's :class:`recall.replica2.HistoryReplica`; the
engine's, which runs the event-query on Spark, is tested in tests/moirae/test_replica2.py).
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive.archiver import Archiver
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from recall.api import OutputKind
from recall.manager import RecallManager
from recall.replica2 import ReplicaStep
from recall.similarity_recall import STATUS_KEY, SimilarityRecall
from similarity.incidents import IncidentRule
from similarity.novelty import NoveltyCalibrator

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPAN = timedelta(hours=1)
USERS = ("alice", "bob", "backup", "miner", "ci")
_ids = itertools.count()


class _CopyReplica:
    """Re-processing of the identity event-query: a unit's raw rows become its events
    and contexts (written to the archive, as the engine's replica keeps what it makes)."""

    def __init__(self, arch: Archiver, raw: pd.DataFrame, units: int, ev: str, cx: str) -> None:
        self.arch, self.raw, self.units, self.ev, self.cx = arch, raw, units, ev, cx
        self.done: set[int] = set()
        self.reprocessed: list[int] = []

    def materialize(self, unit: int) -> None:
        rows = self.raw[(self.raw["ts"] >= T0 + unit * SPAN) & (self.raw["ts"] < T0 + (unit + 1) * SPAN)]
        if len(rows):
            self.arch.append(self.ev, unit, rows[["eid", "ts", "sid"]], bulk=True)  # one batch per unit
            self.arch.append(self.cx, unit, rows[["eid", "ts", "user"]], bulk=True)
        self.done.add(unit)

    def _older(self, before: datetime, bound) -> list[int]:
        return [u for u in range(self.units - 1, -1, -1)
                if T0 + u * SPAN < before and (bound is None or T0 + (u + 1) * SPAN > bound)]

    def remaining(self, streams, before, bound):
        return len(self._older(before, bound)) if self.ev in streams else None

    def produce(self, streams, before, bound, units=1):
        todo = self._older(before, bound)
        if not todo:
            return None
        run = todo[:units]
        work = [u for u in run if u not in self.done]
        for u in work:
            self.materialize(u)
            self.reprocessed.append(u)
        return ReplicaStep(T0 + run[-1] * SPAN, before, len(work), len(todo) - len(run))


class _Replicas:
    """Several event-queries' replicas: each task goes to the one of its streams."""

    def __init__(self, *reps: _CopyReplica) -> None:
        self.reps = reps

    def _of(self, streams):
        return next((r for r in self.reps if r.ev in streams), None)

    def remaining(self, streams, before, bound):
        rep = self._of(streams)
        return None if rep is None else rep.remaining(streams, before, bound)

    def produce(self, streams, before, bound, units=1):
        rep = self._of(streams)
        return None if rep is None else rep.produce(streams, before, bound, units)


def _streams(arch: Archiver, raw: pd.DataFrame, n: int) -> tuple[str, str]:
    ev, cx = f"ev_x{n}", f"cx_x{n}_c"
    arch.register_stream(StreamSpec.build(ev, "ts", {"eid": "text", "sid": "text"}))
    arch.register_stream(StreamSpec.build(cx, "ts", {"eid": "text", "user": "text"}))
    return ev, cx


def _archive(pg, raw: pd.DataFrame, units: int, materialized: int):
    """An archive holding the raw history and the event-query's streams with its
    ``materialized`` newest units materialized; the replica of those streams."""
    n = next(_ids)
    arch = Archiver(pg, ArchiveSettings(chunk_span=SPAN))
    arch.register_stream(StreamSpec.build(f"raw_x{n}", "ts", {"sid": "text", "user": "text"}))
    arch.append(f"raw_x{n}", 0, raw[["ts", "sid", "user"]], bulk=True)  # the raw history, all archived
    rep = _CopyReplica(arch, raw, units, *_streams(arch, raw, n))
    for u in range(units - materialized, units):
        rep.materialize(u)
    return arch, rep, n


def _operator(arch: Archiver, n: int, k: int, learn, novelty: NoveltyCalibrator | None = None) -> SimilarityRecall:
    op = SimilarityRecall(f"sim{n}", event=f"x{n}", store=arch, event_stream=f"ev_x{n}",
                          context_streams=[f"cx_x{n}_c"], k=k, feedback_period=None,
                          incidents=IncidentRule(("sid",), timedelta(minutes=20)), novelty=novelty)
    for eid, ctx in learn:
        op.learn_event(eid, ctx)
    return op


def _final(outs, eid: str) -> tuple[dict, dict]:
    """The held rows ``{key: row}`` and the status row of ``eid``'s outputs."""
    held: dict[str, dict] = {}
    for o in sorted((o for o in outs if o.eid == eid and o.kind is not OutputKind.BOUNDARY), key=lambda o: o.seq):
        if o.kind is OutputKind.INSERT:
            held[o.key] = dict(o.row)
        elif o.kind is OutputKind.DELETE:
            held.pop(o.key)
    return held, held.pop(STATUS_KEY)


def _wait(outs, eid: str) -> None:
    deadline = time.monotonic() + 60
    while not any(o.kind is OutputKind.BOUNDARY and o.eid == eid for o in list(outs)):
        assert time.monotonic() < deadline, f"the task of {eid} did not end"
        time.sleep(0.01)


def _both(pg, raw, units, materialized, alert, k, learn):
    """One alert's final top-k ``{incident: score}`` and status over the fully materialized
    archive and over the one with ``materialized`` newest units, replica2 on for both."""
    arch, rep, n = _archive(pg, raw, units, materialized)
    full = _CopyReplica(arch, raw, units, *_streams(arch, raw, next(_ids)))
    for u in range(units):
        full.materialize(u)
    mgr = RecallManager(arch, max_concurrent=1)
    mgr.set_replica(_Replicas(rep, full), units=2)
    outs: list = []
    mgr.add_sink(outs.append)
    ops = [_operator(arch, n, k, learn), _operator(arch, n + 1, k, learn)]
    try:
        for op in ops:
            mgr.register(op)
            mgr.submit({**alert, "eid": op.name}, [op.name])
            _wait(outs, op.name)
    finally:
        mgr.close()
        for op in ops:
            op.source.close()
        arch.close()
    got = []
    for op in ops:
        held, status = _final(outs, op.name)
        got.append(({key: round(r["score"], 9) for key, r in held.items()}, status))
    return got[0], got[1], rep


def _raw(rows) -> pd.DataFrame:
    frame = pd.DataFrame([(T0 + timedelta(minutes=m), s, u) for m, s, u in rows], columns=["ts", "sid", "user"])
    frame = frame.drop_duplicates(["ts", "sid"]).reset_index(drop=True)
    frame["eid"] = frame["sid"] + ":" + frame["ts"].dt.strftime("%H%M")
    return frame


UNITS = 5
row = st.tuples(st.integers(0, UNITS * 60 - 1), st.sampled_from(["s0", "s1", "s2"]), st.sampled_from(USERS))


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # PostgreSQL's part is tested below on both
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, min_size=1, max_size=25), materialized=st.integers(0, UNITS), k=st.integers(1, 4),
       users=st.lists(st.sampled_from(USERS), min_size=1, max_size=3, unique=True))
def test_top_k_over_a_partly_materialized_archive_equals_the_fully_materialized_one(pg, rows, materialized, k,
                                                                                   users):
    raw = _raw(rows)
    alert = {"ts": T0 + UNITS * SPAN + timedelta(minutes=5), "sid": "s9", "context": [{"user": u} for u in users]}
    learn = [(e, [{"user": u}]) for e, u in zip(raw["eid"], raw["user"], strict=True)] + [("live", alert["context"])]
    (part, part_status), (full, full_status), rep = _both(pg, raw, UNITS, materialized, alert, k, learn)
    assert part == full
    assert full_status["reprocessed_chunks"] == 0
    assert rep.reprocessed == list(range(UNITS - materialized - 1, -1, -1))  # newest first, each once
    for status in (full_status, part_status):  # the whole archive was searched: never "exhausted"
        assert status["whole_archive"] is True and status["status"] != "exhausted", status
        assert status["remaining_chunks"] == 0
    assert part_status["reprocessed_chunks"] == UNITS - materialized


def test_a_past_incident_beyond_the_materialized_span_is_found_and_its_chunks_are_kept(pg):
    """Only the newest two units are materialized; the one incident sharing the alert's
    cause is three hours back. The first alert finds it by re-processing; the second
    reads the re-processed chunks and re-processes nothing; without replica2 the search
    says where it stopped and that its NOVEL covers only that span."""
    background = [(m, "s0", "alice") for m in range(0, UNITS * 60, 37)]
    raw = _raw([*background, (125, "s1", "backup"), (130, "s1", "backup")])
    arch, rep, n = _archive(pg, raw, UNITS, 2)
    op = _operator(arch, n, 1, [(e, [{"user": u}]) for e, u in zip(raw["eid"], raw["user"], strict=True)],
                   novelty=NoveltyCalibrator(fixed=0.5))  # novel: best score under 0.5
    mgr = RecallManager(arch, max_concurrent=2)
    outs: list = []
    mgr.add_sink(outs.append)

    def alert(eid: str) -> tuple[dict, dict]:
        mgr.submit({"eid": eid, "ts": T0 + UNITS * SPAN, "sid": "s9", "context": [{"user": "backup"}]}, [op.name])
        _wait(outs, eid)
        return _final(outs, eid)

    try:
        mgr.register(op)
        held, status = alert("blind")  # replica2 off: the materialized span only
        assert "s1:0205" not in held
        assert status["status"] == "exhausted" and status["whole_archive"] is False
        assert status["searched_back_to"] >= (T0 + (UNITS - 2) * SPAN).isoformat()
        # NOVEL, but only of the span searched: it says which
        assert status["novel"] is True and status["novel_span"][0] == status["searched_back_to"]

        mgr.set_replica(rep, units=2)
        held, status = alert("first")
        assert list(held) == ["s1:0205"] and status["status"] != "novel" and status["novel"] is False
        assert status["whole_archive"] is True and status["reprocessed_chunks"] == UNITS - 2
        assert rep.reprocessed == list(range(UNITS - 3, -1, -1))
        view = next(t for t in mgr.tasks("first"))
        assert view.searched_back_to == T0 and view.remaining_chunks == 0 and view.reprocessed_chunks == UNITS - 2
        assert view.as_dict()["materialized_until"] == (T0 + (UNITS - 2) * SPAN).isoformat()

        built = op.source.builds
        held2, status2 = alert("second")
        assert held2.keys() == held.keys() and held2["s1:0205"]["score"] == held["s1:0205"]["score"]
        assert rep.reprocessed == list(range(UNITS - 3, -1, -1))  # nothing re-processed again
        assert status2["reprocessed_chunks"] == 0 and status2["whole_archive"] is True
        assert op.source.builds == built  # the chunks' indexes were kept (persisted), not rebuilt
    finally:
        mgr.close()
        op.source.close()
        arch.close()


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)
def test_a_standard_recall_over_the_event_stream_migrates_too(pg):
    """A Recall counting past events: with replica2 it counts the whole raw history's
    events, without it only the materialized span's."""
    from recall.operator import Recall

    raw = _raw([(m, f"s{m % 3}", "alice") for m in range(0, UNITS * 60, 41)])
    arch, rep, n = _archive(pg, raw, UNITS, 2)
    op = Recall(f"cnt{n}", f"SELECT count(*) AS n FROM ev_x{n}", store=arch, feedback_period=None)
    mgr = RecallManager(arch, max_concurrent=1)
    outs: list = []
    mgr.add_sink(outs.append)
    try:
        mgr.register(op)
        counts = {}
        for eid, replica in (("without", None), ("with", rep)):
            mgr.set_replica(replica)
            mgr.submit({"eid": eid, "ts": T0 + UNITS * SPAN}, [op.name])
            _wait(outs, eid)
            held: dict[str, dict] = {}
            for o in sorted((o for o in outs if o.eid == eid and o.kind is not OutputKind.BOUNDARY),
                            key=lambda o: o.seq):
                if o.kind in (OutputKind.INSERT, OutputKind.UPDATE):
                    held[o.key] = dict(o.row)
                else:
                    held.pop(o.key, None)
            counts[eid] = next(iter(held.values()))["n"]
    finally:
        mgr.close()
        arch.close()
    in_span = int((raw["ts"] >= T0 + (UNITS - 2) * SPAN).sum())
    assert counts == {"without": in_span, "with": len(raw)}
