"""Similarity indexes are built when chunks are sealed, not when an event first asks
(issue 10 §1; recall/similarity_prebuild.py).

Real PostgreSQL (both servers): live appends fill present chunks of an event stream and
a context stream; demotion seals some of them; the background builder persists their
indexes with no event task asking; the first event's task then builds no sealed chunk
(loads or cache hits only), and its outputs equal those of an operator that rebuilds
every chunk from the archive.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from archive import Archiver, ArchiveSettings, StreamSpec, simindex
from recall.api import Interval
from recall.similarity_prebuild import IndexPrebuilder
from recall.similarity_recall import SimilarityRecall

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SPAN = timedelta(hours=1)
USERS, PROCS = ["alice", "bob", "carol", "dan"], ["cron", "backup.sh", "java", "sshd", "vim"]


def _live_archive(db) -> tuple[Archiver, list[dict]]:
    """Four hours of events, appended as live micro-batches: every chunk is present."""
    rng = np.random.default_rng(5)
    events = [{"eid": f"e{i}", "ts": T0 + timedelta(minutes=int(m)), "host": f"h{i % 3}",
               "context": [{"user": USERS[int(rng.integers(4))], "proc": PROCS[int(rng.integers(5))]}
                           for _ in range(3)]}
              for i, m in enumerate(sorted(rng.integers(0, 240, 80)))]
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, recent_chunks=10))
    arch.register_stream(StreamSpec.build("ev_x", "ts", {"eid": "text", "host": "text"}))
    arch.register_stream(StreamSpec.build("cx_x_c", "ts", {"eid": "text", "user": "text", "proc": "text"}))
    arch.append("ev_x", 1, pd.DataFrame([{"ts": e["ts"], "eid": e["eid"], "host": e["host"]} for e in events]))
    arch.append("cx_x_c", 1, pd.DataFrame([{"ts": e["ts"], "eid": e["eid"], **t} for e in events
                                           for t in e["context"]]))
    return arch, events


def _op(arch: Archiver, events: list[dict], **kw) -> SimilarityRecall:
    op = SimilarityRecall("sim", event="x", store=arch, event_stream="ev_x", context_streams=["cx_x_c"], k=3, **kw)
    for e in events:
        op.learn_event(e["eid"], e["context"])
    return op


def _task(op: SimilarityRecall, arch: Archiver) -> list[tuple]:
    """One event's task over every chunk, newest first, as the Recall Manager runs it."""
    event = {"eid": "new", "ts": T0 + timedelta(hours=5), "context": [{"user": "alice"}, {"proc": "backup.sh"}]}
    state = op.start(op.task_for(event))
    out = []
    for c in sorted(arch.chunk_ids(["ev_x", "cx_x_c"]), reverse=True):
        out += op.on_chunk(state, c, Interval(*arch.grid.bounds(c)), op.fetch_chunk(state, c))
    return [(o.kind.value, o.key, o.row.get("past_eid"), o.row.get("score")) for o in out]


def _building(db, start: bool = True) -> tuple[Archiver, list[dict], SimilarityRecall, IndexPrebuilder]:
    """The live archive, its operator, and a background builder for it (started)."""
    arch, events = _live_archive(db)
    op = _op(arch, events)
    builder = IndexPrebuilder()
    builder.add(op)
    if start:
        builder.start()
    return arch, events, op, builder


def test_sealed_chunks_are_indexed_in_the_background_and_the_first_task_builds_none(pg):
    arch, events, op, builder = _building(pg)
    try:
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x_c"]))
        assert len(chunks) == 4 and {c.tier.value for c in arch.chunks()} == {"present"}
        store = simindex.IndexStore(arch, "sim")
        assert store.chunk_ids() == []
        arch.demote(T0 + timedelta(hours=3))                 # seals the three oldest chunks of both streams
        assert builder.drain(timeout=60)
        sealed, present = chunks[:3], chunks[3]
        assert store.chunk_ids() == sealed                   # persisted with no event task asking
        assert dict(op.source.built_chunks) == {c: 1 for c in sealed}
        assert builder.built == 3 and builder.failed == 0

        first = _task(op, arch)                              # the first event's task
        assert dict(op.source.built_chunks) == {**{c: 1 for c in sealed}, present: 1}  # only the present one built

        restarted = _op(arch, events)                        # a restart: loads the persisted indexes
        assert _task(restarted, arch) == first
        assert restarted.source.loads == 3 and set(restarted.source.built_chunks) == {present}

        rebuilt = _op(arch, events, persist_index=False)     # the reference: every chunk built from its rows
        assert _task(rebuilt, arch) == first
    finally:
        builder.close()
        arch.close()


def test_a_chunk_sealed_in_one_stream_only_waits_for_the_other(pg):
    arch, _events, op, builder = _building(pg)
    try:
        oldest = min(arch.chunk_ids(["ev_x"]))
        arch.demote(T0 + timedelta(hours=1), ["ev_x"])       # the contexts of that hour are still present
        assert builder.drain(timeout=60)
        assert builder.built == 0 and builder.skipped == 1 and op.source.builds == 0
        arch.demote(T0 + timedelta(hours=1), ["cx_x_c"])
        assert builder.drain(timeout=60)
        assert simindex.IndexStore(arch, "sim").chunk_ids() == [oldest] and op.source.builds == 1
    finally:
        builder.close()
        arch.close()


def test_a_failing_build_is_logged_and_the_builder_goes_on_and_stops(pg, caplog):
    arch, _events, op, builder = _building(pg, start=False)
    real = op.source.build
    calls = []

    def flaky(chunk_id, conn=None, timeout_ms=None):
        calls.append(chunk_id)
        if len(calls) == 1:
            raise RuntimeError("disk on fire")
        return real(chunk_id, conn, timeout_ms)

    op.source.build = flaky
    try:
        arch.demote(T0 + timedelta(hours=2))                 # queued while the worker is not running yet
        assert builder.pending() == 2
        builder.start()
        assert builder.drain(timeout=60)
        assert builder.failed == 1 and builder.built == 1 and "disk on fire" in builder.last_error
        assert any("background build failed" in r.getMessage() for r in caplog.records)
        failed = calls[0]                                    # the newest sealed chunk went first
        assert failed == max(simindex.IndexStore(arch, "sim").chunk_ids()) + 1
        op.fetch_chunk(None, failed)                         # built on first use instead
        assert failed in simindex.IndexStore(arch, "sim").chunk_ids()
    finally:
        builder.close()
    assert builder._thread is None
    arch.demote(T0 + timedelta(hours=4))                     # a closed builder takes no more work
    assert builder.pending() == 0
    arch.close()


def test_a_build_racing_an_invalidation_is_not_kept(pg):
    arch, events = _live_archive(pg)
    arch.demote(T0 + timedelta(hours=1))
    op = _op(arch, events)
    oldest = min(arch.chunk_ids(["ev_x"]))
    real = op.source.build

    def late_row_meanwhile(chunk_id, conn=None, timeout_ms=None):
        ix = real(chunk_id, conn, timeout_ms)               # read before the late row commits
        late = pd.DataFrame([{"ts": T0 + timedelta(minutes=1), "eid": events[0]["eid"], "user": "zed", "proc": "x"}])
        arch.append("cx_x_c", 2, late)
        return ix

    op.source.build = late_row_meanwhile
    assert op.source.prebuild_one(oldest)
    op.source.build = real
    assert simindex.IndexStore(arch, "sim").chunk_ids() == []   # the stale index is gone
    ix = op.fetch_chunk(None, oldest)
    assert "user=zed" in {op.stats.vocabulary.term(c) for c in ix.chunk.tf_sq.indices}
    arch.close()


@pytest.fixture(autouse=True)
def _no_leftover_listeners():
    before = list(simindex._ready)
    yield
    assert simindex._ready == before
