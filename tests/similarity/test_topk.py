"""Chunked scoring and top-k merging equal brute force (M 3.5, 4.5.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import (
    ChunkScores,
    ContextChunk,
    ContextStatistics,
    NumericSpec,
    QueryScorer,
    SimilarityConfig,
    TopK,
    brute_force,
    cosine,
    search,
    top_k,
)
from tests.similarity.sim_strategies import context, contexts


def _naive_top(scores: ChunkScores, k: int):
    """Independent oracle for the order: full Python sort of every positive score."""
    rows = [(-s, -t, e) for e, t, s in zip(scores.eids.tolist(), scores.ts.tolist(), scores.scores.tolist(), strict=True)
            if s > 0]
    return [(e, -negt, -negs) for negs, negt, e in sorted(rows)[:k]]


def _split(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    edges = sorted({0, n, *(c % (n + 1) for c in cuts)})
    return list(zip(edges[:-1], edges[1:], strict=False))


@settings(max_examples=60, deadline=None)
@given(contexts, context, st.lists(st.integers(0, 40), max_size=4), st.integers(1, 6), st.data())
def test_chunked_topk_equals_brute_force_and_is_monotone(history, query, cuts, k, data):
    ts = data.draw(st.lists(st.integers(0, 5), min_size=len(history), max_size=len(history)))
    stats = ContextStatistics()
    chunks = []
    # history arrives chunk by chunk; the vocabulary grows between chunk builds
    for lo, hi in _split(len(history), cuts):
        stats.learn_many(history[lo:hi])
        chunks.append(ContextChunk.from_contexts(list(range(lo, hi)), ts[lo:hi], history[lo:hi], stats))
    stats.learn_one(query)
    table = stats.table()
    scorer = QueryScorer(table, query)

    # vectorised scores == the reference cosine of M 3.5
    qbag = table.bag(query)
    for chunk, (lo, _hi) in zip(chunks, _split(len(history), cuts), strict=True):
        got = scorer.score(chunk).scores
        want = [cosine(qbag, table.bag(history[lo + i]), table) for i in range(chunk.n)]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)

    # newest chunk first, as the Recall Manager delivers them; each prefix is exact
    tracker = TopK(k)
    seen: list[ContextChunk] = []
    for chunk in reversed(chunks):
        before = tracker.items
        inserted, displaced = tracker.offer(scorer.score(chunk))
        seen.append(chunk)
        prefix = brute_force(table, query, seen, k).neighbours
        assert tracker.items == prefix
        assert [(n.eid, n.ts, n.score) for n in prefix] == _naive_top(scorer.score(ContextChunk.concat(seen)), k)
        # the report is exactly the difference between consecutive lists
        assert {n.eid for n in before} - {n.eid for n in displaced} | {n.eid for n in inserted} == {
            n.eid for n in tracker.items
        }
        assert not ({n.eid for n in inserted} & {n.eid for n in before})
    assert search(table, query, list(reversed(chunks)), k) == brute_force(table, query, chunks, k)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.integers(0, 3)), max_size=12),
        min_size=1, max_size=6,
    ),
    st.integers(1, 5),
)
def test_topk_merging_with_many_ties(chunk_rows, k):
    tracker = TopK(k)
    eid = 0
    offered: list[tuple[int, int, float]] = []
    for rows in chunk_rows:
        eids = np.arange(eid, eid + len(rows))
        eid += len(rows)
        cs = ChunkScores(eids, np.array([t for _, t in rows], dtype=np.int64), np.array([s for s, _ in rows]))
        offered += list(zip(eids.tolist(), cs.ts.tolist(), cs.scores.tolist(), strict=True))
        tracker.offer(cs)
        everything = ChunkScores(
            np.array([e for e, _, _ in offered], dtype=np.int64),
            np.array([t for _, t, _ in offered], dtype=np.int64),
            np.array([s for _, _, s in offered]),
        )
        want = _naive_top(everything, k)
        assert [(n.eid, n.ts, n.score) for n in tracker.items] == want
        assert [(n.eid, n.ts, n.score) for n in top_k(everything, k)] == want


def test_reoffering_a_chunk_changes_nothing():
    t = TopK(2)
    cs = ChunkScores(np.array([1, 2, 3]), np.array([1, 2, 3]), np.array([0.3, 0.2, 0.1]))
    t.offer(cs)
    assert t.offer(cs) == ((), ())
    assert [n.eid for n in t.items] == [1, 2]


def test_string_eids_and_datetime_timestamps():
    stats = ContextStatistics()
    past = [[{"u": "a"}], [{"u": "a"}], [{"u": "b"}]]
    stats.learn_many(past)
    ts = np.array(["2026-01-01T00:00", "2026-01-02T00:00", "2026-01-03T00:00"], dtype="datetime64[s]")
    chunk = ContextChunk.from_contexts(["x", "y", "z"], ts, past, stats)
    stats.learn_one([{"u": "a"}])
    res = search(stats.table(), [{"u": "a"}], [chunk], k=2)
    assert [n.eid for n in res.neighbours] == ["y", "x"]  # equal scores: the more recent first


def test_chunks_built_with_an_older_vocabulary_score_like_new_ones():
    stats = ContextStatistics()
    old = [[{"u": "a"}, {"p": "x"}]]
    stats.learn_many(old)
    old_chunk = ContextChunk.from_contexts([1], [1], old, stats)
    new = [[{"u": "a"}, {"p": "y"}, {"q": "z"}]]
    stats.learn_many(new)
    new_chunk = ContextChunk.from_contexts([2], [2], new, stats)
    assert old_chunk.n_cols < new_chunk.n_cols
    query = [{"u": "a"}, {"q": "z"}, {"r": "w"}]  # "r=w" is unknown to every chunk
    stats.learn_one(query)
    table = stats.table()
    scorer = QueryScorer(table, query)
    qbag = table.bag(query)
    assert scorer.score(old_chunk).scores[0] == pytest.approx(cosine(qbag, table.bag(old[0]), table), rel=1e-12)
    assert scorer.score(new_chunk).scores[0] == pytest.approx(cosine(qbag, table.bag(new[0]), table), rel=1e-12)


def test_a_table_older_than_the_chunk_pads_new_columns_with_log_e():
    stats = ContextStatistics()
    stats.learn_many([[{"u": "a"}], [{"u": "b"}]])
    table = stats.table()
    chunk = ContextChunk.from_contexts([1], [1], [[{"u": "a"}, {"p": "new"}]], stats)  # grows the vocabulary
    want = cosine(table.bag([{"u": "a"}]), table.bag([{"u": "a"}, {"p": "new"}]), table)
    assert QueryScorer(table, [{"u": "a"}]).score(chunk).scores[0] == pytest.approx(want, rel=1e-12)
    assert table.term_idf("p=new") == table.unknown_idf


def test_norms_are_remembered_per_table():
    stats = ContextStatistics()
    past = [[{"u": "a"}], [{"u": "b"}, {"u": "c"}]]
    stats.learn_many(past)
    chunk = ContextChunk.from_contexts([1, 2], [1, 2], past, stats)
    t1 = stats.table()
    first = QueryScorer(t1, [{"u": "a"}]).score(chunk).scores
    assert chunk.memo(t1.token) is not None
    stats.learn_one([{"u": "a"}])
    t2 = stats.table()
    second = QueryScorer(t2, [{"u": "a"}]).score(chunk).scores
    assert chunk.memo(t1.token) is None and chunk.memo(t2.token) is not None
    assert second[0] == pytest.approx(1.0) and first[0] == pytest.approx(1.0)


def test_numeric_chunked_equals_brute_force():
    cfg = SimilarityConfig(numeric={"temp": NumericSpec()})
    rng = np.random.default_rng(11)
    stats = ContextStatistics(cfg)
    hist = [[{"host": f"h{rng.integers(4)}"}, {"temp": float(np.round(rng.normal(20, 3), 1))}] for _ in range(300)]
    chunks = []
    for lo in range(0, 300, 70):
        stats.learn_many(hist[lo : lo + 70])
        chunks.append(ContextChunk.from_contexts(list(range(lo, lo + len(hist[lo:lo + 70]))),
                                                 list(range(lo, lo + len(hist[lo:lo + 70]))), hist[lo:lo + 70], stats))
    query = [{"host": "h2"}, {"temp": 21.0}]
    stats.learn_one(query)
    table = stats.table()
    assert search(table, query, chunks[::-1], 10) == brute_force(table, query, chunks, 10)
    scores = QueryScorer(table, query).score(chunks[0]).scores
    qbag = table.bag(query)
    want = [cosine(qbag, table.bag(c), table) for c in hist[:70]]
    np.testing.assert_allclose(scores, want, rtol=1e-9)


def test_object_dtype_eids_as_pandas_would_hand_them_over():
    t = TopK(2)
    eids = np.array(["ev-1", "ev-2", "ev-3"], dtype=object)
    t.offer(ChunkScores(eids, np.array([3.0, 2.0, 1.0]), np.array([0.1, 0.9, 0.1])))
    assert [n.eid for n in t.items] == ["ev-2", "ev-1"]
    assert all(type(n.eid) is str for n in t.items)
