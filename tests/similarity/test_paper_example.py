"""The worked example of M fig. 5, reconstructed.

The figure's table text is garbled in the paper's transcription; the contexts below are
the only ones consistent with its counts (E=3; C_u1=1, C_u2=2, C_u3=1, C_p1=2, C_p2=1,
C_p3=2) and its scores: e1 = {u1, p1}, e2 = {u2, u3, p2, p3}, e3 = {u2, p1, p3}.

The figure's IDFs are base-10 logarithms: log10(3/1) = 0.477 -> 0.48 and
log10(3/2) = 0.176 -> 0.18. Its cosines (0.203, 0.287) are computed from those *rounded*
IDFs; with exact IDFs they are 0.200 and 0.283. The base itself does not matter for the
cosine (every weight scales by the same factor), which the last test checks.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from similarity import (
    ContextChunk,
    ContextStatistics,
    QueryScorer,
    SimilarityConfig,
    brute_force,
    cosine,
)

E1 = [{"eid": "e1", "user": "u1"}, {"eid": "e1", "proc": "p1"}]
E2 = [{"eid": "e2", "user": "u2"}, {"eid": "e2", "user": "u3"}, {"eid": "e2", "proc": "p2"}, {"eid": "e2", "proc": "p3"}]
E3 = [{"eid": "e3", "user": "u2"}, {"eid": "e3", "proc": "p1"}, {"eid": "e3", "proc": "p3"}]


def _stats(base: float = 10.0) -> ContextStatistics:
    s = ContextStatistics(SimilarityConfig(log_base=base), event_type="failure")
    for ctx in (E1, E2, E3):
        s.learn_one(ctx)
    return s


def test_counts_match_the_figure():
    s = _stats()
    assert s.events == 3
    expected = {"user=u1": 1, "user=u2": 2, "user=u3": 1, "proc=p1": 2, "proc=p2": 1, "proc=p3": 2}
    assert {t: s.doc_freq(t) for t in expected} == expected
    assert s.doc_freq("eid=e1") == 0  # eid is not a term


def test_idf_is_base_10_as_in_the_figure():
    t = _stats().table()
    assert round(t.term_idf("user=u1"), 2) == 0.48
    assert round(t.term_idf("user=u2"), 2) == 0.18
    assert round(t.term_idf("proc=p2"), 2) == 0.48
    assert round(t.term_idf("proc=p3"), 2) == 0.18


def test_cosines_with_the_figures_rounded_idf():
    t = _stats().table()
    rounded = np.round(t.idf, 2)
    rounded.setflags(write=False)
    t2 = dataclasses.replace(t, idf=rounded)
    b1, b2, b3 = (t2.bag(c) for c in (E1, E2, E3))
    assert cosine(b1, b2, t2) == 0.0
    assert round(cosine(b1, b3, t2), 3) == 0.203
    assert round(cosine(b2, b3, t2), 3) == 0.287


def test_exact_idf_keeps_the_ordering():
    t = _stats().table()
    b1, b2, b3 = (t.bag(c) for c in (E1, E2, E3))
    s12, s13, s23 = cosine(b1, b2, t), cosine(b1, b3, t), cosine(b2, b3, t)
    assert s12 == 0.0
    a, b = math.log(3), math.log(1.5)  # IDF of a term in one / two of the three contexts
    assert s13 == pytest.approx(b * b / (math.hypot(a, b) * math.sqrt(3) * b), rel=1e-12)
    assert s23 == pytest.approx(2 * b * b / (math.sqrt(2 * a * a + 2 * b * b) * math.sqrt(3) * b), rel=1e-12)
    assert round(s13, 3) == 0.200 and round(s23, 3) == 0.283
    assert s23 > s13 > s12


def test_vectorised_scorer_agrees_and_ranks_e2_first_for_e3():
    s = _stats()
    chunk = ContextChunk.from_contexts(["e1", "e2"], [1, 2], [E1, E2], s)
    t = s.table()
    scores = QueryScorer(t, E3).score(chunk).scores
    assert scores == pytest.approx([cosine(t.bag(E3), t.bag(E1), t), cosine(t.bag(E3), t.bag(E2), t)], rel=1e-12)
    best = brute_force(t, E3, [chunk], k=1).neighbours
    assert [n.eid for n in best] == ["e2"]
    assert QueryScorer(t, E1).score(ContextChunk.from_contexts(["e2"], [2], [E2], s)).scores.tolist() == [0.0]


def test_log_base_does_not_change_the_cosine():
    t10, te = _stats(10.0).table(), _stats(math.e).table()
    for a, b in ((E1, E3), (E2, E3), (E1, E2)):
        assert cosine(t10.bag(a), t10.bag(b), t10) == pytest.approx(cosine(te.bag(a), te.bag(b), te), rel=1e-12)
