"""Similarity indexes are built when chunks are sealed, not when an event first asks
(recall/similarity_prebuild.py).

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


def _live_archive(db, **settings) -> tuple[Archiver, list[dict]]:
    """Four hours of events, appended as live micro-batches: every chunk is present."""
    rng = np.random.default_rng(5)
    events = [{"eid": f"e{i}", "ts": T0 + timedelta(minutes=int(m)), "host": f"h{i % 3}",
               "context": [{"user": USERS[int(rng.integers(4))], "proc": PROCS[int(rng.integers(5))]}
                           for _ in range(3)]}
              for i, m in enumerate(sorted(rng.integers(0, 240, 80)))]
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, recent_chunks=10, **settings))
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
        store = arch.index_store("sim")
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
        assert arch.index_store("sim").chunk_ids() == [oldest] and op.source.builds == 1
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
        assert failed == max(arch.index_store("sim").chunk_ids()) + 1
        op.fetch_chunk(None, failed)                         # built on first use instead
        assert failed in arch.index_store("sim").chunk_ids()
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
    assert arch.index_store("sim").chunk_ids() == []   # the stale index is gone
    ix = op.fetch_chunk(None, oldest)
    assert "user=zed" in {op.stats.vocabulary.term(c) for c in ix.chunk.tf_sq.indices}
    arch.close()


def _late_context(arch: Archiver, events: list[dict], batch: int, user: str, hour: int = 3) -> str:
    """Append one more context row of the first event of ``hour`` (a present chunk); its eid."""
    eid = next(e for e in events if e["ts"] >= T0 + timedelta(hours=hour))["eid"]
    ts = next(e["ts"] for e in events if e["eid"] == eid)
    arch.append("cx_x_c", batch, pd.DataFrame([{"ts": ts, "eid": eid, "user": user, "proc": "x"}]))
    return eid


def _terms(op: SimilarityRecall, ix) -> set[str]:
    return {op.stats.vocabulary.term(c) for c in ix.chunk.tf_sq.indices}


@pytest.mark.parametrize("ctx_interval", [None, timedelta(minutes=10)], ids=["same-grid", "finer-context-grid"])
def test_a_present_chunk_is_built_once_until_its_rows_change(pg, ctx_interval):
    """Every task used to read and build every present chunk again; now the tasks share
    one build until a write to one of the operator's streams invalidates it. With a
    context stream on a finer grid than the task grid, its write invalidates the task
    chunk it falls in."""
    arch, events = _live_archive(pg, **({"chunk_intervals": {"cx_x_c": ctx_interval}} if ctx_interval else {}))
    try:
        op = _op(arch, events)
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x_c"]))
        assert len(chunks) == 4 and {c.tier.value for c in arch.chunks()} == {"present"}
        first = _task(op, arch)
        assert dict(op.source.built_chunks) == {c: 1 for c in chunks}
        assert _task(op, arch) == first                      # the next event's task: no build at all
        assert dict(op.source.built_chunks) == {c: 1 for c in chunks} and op.source.present_hits == 4
        assert arch.index_store("sim").chunk_ids() == []   # present: never persisted

        _late_context(arch, events, 2, "zed")                # a write into the newest chunk
        newest = chunks[-1]
        after = _task(op, arch)
        assert dict(op.source.built_chunks) == {**{c: 1 for c in chunks[:-1]}, newest: 2}
        assert "user=zed" in _terms(op, op.fetch_chunk(None, newest))
        assert after == _task(_op(arch, events, persist_index=False), arch)   # the same as building every chunk
    finally:
        arch.close()


def test_a_kept_present_index_is_served_without_a_catalog_read_and_gives_way_once_sealed(pg):
    arch, events = _live_archive(pg)
    try:
        op = _op(arch, events)
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x_c"]))
        first = _task(op, arch)
        lookups = []
        real = op.source.persisted.lookup
        op.source.persisted.lookup = lambda *a, **k: lookups.append(a[0]) or real(*a, **k)
        assert _task(op, arch) == first and lookups == []  # every chunk kept: no round trip
        arch.demote(T0 + timedelta(hours=2))  # seals the two oldest: their rows are the same
        sealed = [c for c in chunks if arch.grid.bounds(c)[1] <= T0 + timedelta(hours=2)]
        assert len(sealed) == 2
        assert _task(op, arch) == first and lookups == [] and dict(op.source.built_chunks) == {c: 1 for c in chunks}
        for c in sealed:  # the background build persists them and serves them from then on
            assert op.source.prebuild_one(c)
        assert sorted(arch.index_store("sim").chunk_ids()) == sealed
        hits = op.source.present_hits
        assert _task(op, arch) == first and lookups == []
        assert op.source.present_hits == hits + len(chunks) - len(sealed)  # the sealed ones from the cache
    finally:
        arch.close()


def test_a_present_build_racing_an_append_is_used_once_and_not_kept(pg):
    arch, events = _live_archive(pg)
    try:
        op = _op(arch, events)
        newest = max(arch.chunk_ids(["ev_x"]))
        real = op.source.build

        def append_meanwhile(chunk_id, conn=None, timeout_ms=None):
            ix = real(chunk_id, conn, timeout_ms)           # read before the new row commits
            _late_context(arch, events, 2, "zed")
            return ix

        op.source.build = append_meanwhile
        stale = op.fetch_chunk(None, newest)
        op.source.build = real
        assert "user=zed" not in _terms(op, stale)
        fresh = op.fetch_chunk(None, newest)                 # not kept: built again, with the row
        assert "user=zed" in _terms(op, fresh) and op.source.built_chunks[newest] == 2
        assert op.fetch_chunk(None, newest) is fresh         # and that one is kept
    finally:
        arch.close()


def test_the_per_chunk_state_lasts_only_while_a_chunk_is_worked_on(pg, monkeypatch):
    """A long run reads every chunk of its archive: the per-chunk locks and build
    trackers go once no task works on a chunk, and the build counts keep the latest
    chunks only (they used to keep one entry per chunk ever read or written)."""
    from concurrent.futures import ThreadPoolExecutor

    from recall import similarity_source

    monkeypatch.setattr(similarity_source, "BUILT_KEPT", 2)
    arch, events = _live_archive(pg)
    try:
        op = _op(arch, events)
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x_c"]))
        real, started = op.source.build, []

        def slow(chunk_id, conn=None, timeout_ms=None):  # the other threads queue on the chunk's lock
            started.append(chunk_id)
            assert op.source._locks[chunk_id][1] >= 1 and chunk_id in op.source._inflight
            return real(chunk_id, conn, timeout_ms)

        op.source.build = slow
        with ThreadPoolExecutor(4) as pool:
            built = list(pool.map(lambda c: op.fetch_chunk(None, c), [c for c in chunks for _ in range(3)]))
        assert sorted(started) == chunks                     # one build per chunk: the waiters used it
        assert all(built[3 * i] is built[3 * i + 2] for i in range(len(chunks)))
        assert op.source._locks == {} and op.source._inflight == {}
        _late_context(arch, events, 2, "zed")                # an invalidation with no build in flight
        assert op.source._inflight == {}
        arch.demote(T0 + timedelta(hours=3))
        for c in chunks[:3]:
            assert op.source.prebuild_one(c)
        op.source.build = real
        _task(op, arch)
        assert op.source._locks == {} and op.source._inflight == {}
        assert len(op.source.built_chunks) == 2              # the bound, not one entry per chunk
    finally:
        arch.close()


@pytest.fixture(autouse=True)
def _no_leftover_listeners():
    before = list(simindex._ready)
    yield
    assert simindex._ready == before
