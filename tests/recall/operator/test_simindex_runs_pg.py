"""Runs of small sealed chunks read as one (``SimilarityRecall.fetch_run``): the results
a task holds after a run are those it holds after reading the same chunks one by one,
and a write to a chunk drops the runs that hold it. Real PostgreSQL."""

from __future__ import annotations

from recall.api import Interval, OutputKind
from recall.similarity_source import RUN_BLOCK
from tests.recall.operator.test_simindex_pg import _chunks, _fixed, _op


def _held(outputs) -> dict:
    """The rows a user holds after applying the outputs (INSERT / DELETE by key),
    without the rank within the read (a run ranks its chunks' results together)."""
    held = {}
    for o in outputs:
        if o.key == "__status__":
            continue
        if o.kind is OutputKind.DELETE:
            held.pop(o.key, None)
        elif o.kind is OutputKind.INSERT:
            held[o.key] = {k: v for k, v in o.row.items() if k != "rank_in_chunk"}
    return held


def _one_by_one(op, arch, event):
    state = op.start(op.task_for(event))
    out = []
    for c in _chunks(arch):
        out += op.on_chunk(state, c, Interval(*arch.grid.bounds(c)), op.fetch_chunk(state, c))
    return out, state


def _in_runs(op, arch, event):
    state = op.start(op.task_for(event))
    ids, out, reads = _chunks(arch), [], []
    while ids:
        n, ix = op.fetch_run(state, ids)
        assert ix.span == n >= 1
        out += op.on_chunk(state, ids[n - 1], Interval(arch.grid.bounds(ids[n - 1])[0], arch.grid.bounds(ids[0])[1]),
                           ix)
        reads.append(n)
        ids = ids[n:]
    return out, state, reads


def test_a_run_holds_what_chunk_by_chunk_holds(pg):
    arch, events, q = _fixed(pg)
    op = _op(arch, events)
    first, s1 = _one_by_one(op, arch, q)  # builds every chunk's index: all in memory now
    again, s2, reads = _in_runs(op, arch, q)
    chunks = _chunks(arch)
    assert len(chunks) > 1 and len(reads) < len(chunks)  # some chunks were read together
    assert all(len({c // RUN_BLOCK for c in chunks[sum(reads[:i]):sum(reads[:i + 1])]}) == 1
               for i in range(len(reads)))  # a run never crosses a block
    assert _held(again) == _held(first) and _held(first)
    assert s2.chunks == s1.chunks == len(chunks)
    assert len(again) < len(first)  # fewer revisions on the way
    assert op.source.runs >= 1 and op.source.run_chunks > op.source.runs
    arch.close()


def test_a_run_stops_at_a_chunk_not_in_memory_and_at_the_row_bound(pg):
    arch, events, q = _fixed(pg)
    op = _op(arch, events, coalesce_rows=1)
    _one_by_one(op, arch, q)
    state = op.start(op.task_for(q))
    assert op.fetch_run(state, _chunks(arch))[0] == 1  # every chunk holds more than one past event
    op2 = _op(arch, events)  # a fresh operator: nothing in memory, the first chunk is read alone
    assert op2.fetch_run(op2.start(op2.task_for(q)), _chunks(arch))[0] == 1
    arch.close()


def test_a_write_drops_the_runs_holding_its_chunk(pg):
    arch, events, q = _fixed(pg)
    op = _op(arch, events)
    _one_by_one(op, arch, q)
    _in_runs(op, arch, q)
    held = list(op.source._runs)
    assert held
    from archive import simindex

    victim = held[0][-1]
    simindex.invalidate(arch.db, "cx_x_c", [victim])
    assert all(victim not in k for k in op.source._runs)
    arch.close()


def test_a_sealed_chunk_is_persisted_from_its_kept_present_index(pg):
    from datetime import timedelta

    from tests.recall.operator.test_simindex_prebuild_pg import T0
    from tests.recall.operator.test_simindex_prebuild_pg import _live_archive as live
    from tests.recall.operator.test_simindex_prebuild_pg import _op as op_of
    from tests.recall.operator.test_simindex_prebuild_pg import _task as task

    arch, events = live(pg)
    try:
        op = op_of(arch, events)
        first = task(op, arch)  # every chunk present: built once and kept
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x_c"]))
        built = dict(op.source.built_chunks)
        arch.demote(T0 + timedelta(hours=2))  # seals the two oldest: their rows are the same
        sealed = [c for c in chunks if arch.grid.bounds(c)[1] <= T0 + timedelta(hours=2)]
        for c in sealed:
            assert op.source.prebuild_one(c)
        assert op.source.promoted == len(sealed) and dict(op.source.built_chunks) == built  # not read again
        assert sorted(arch.index_store("sim").chunk_ids()) == sealed
        fresh = op_of(arch, events)  # reads the persisted indexes: the same results as the kept ones
        assert task(fresh, arch) == first and fresh.source.loads == len(sealed)
    finally:
        arch.close()
