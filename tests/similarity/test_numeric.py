"""Numeric attributes: Agrawal et al.'s kernel IDF from a histogram synopsis (M 3.5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import ContextChunk, ContextStatistics, NumericSpec, QueryScorer, SimilarityConfig, cosine
from similarity.synopsis import NumericSynopsis, kernel

TOLERANCE = 0.05
"""Largest |histogram IDF - exact IDF| accepted (natural log). The synopsis module
derives about 0.03 when the bin width is at most h/4, which the defaults keep here."""


def exact_idf(values: np.ndarray, k: np.ndarray, h: float) -> np.ndarray:
    """Agrawal et al.'s generalised IDF by a full scan, with the same clamps."""
    soft = kernel(values[None, :] - k[:, None], h).sum(axis=1)
    return np.maximum(np.log(max(len(values), 1) / np.maximum(soft, 1.0)), 0.0)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["normal", "uniform", "mixture", "lognormal", "sorted"]),
    st.integers(40, 3000),
    st.integers(0, 2**31 - 1),
)
def test_histogram_idf_is_within_tolerance_of_the_exact_kernel_idf(shape, n, seed):
    rng = np.random.default_rng(seed)
    if shape == "normal":
        values = rng.normal(50, 7, n)
    elif shape == "uniform":
        values = rng.uniform(-3, 3, n)
    elif shape == "mixture":
        values = np.where(rng.random(n) < 0.3, rng.normal(0, 1, n), rng.normal(20, 3, n))
    elif shape == "lognormal":
        values = rng.lognormal(0, 1, n)
    else:
        values = np.sort(rng.normal(0, 1, n))  # a trend: warm-up sees a narrow slice
    syn = NumericSynopsis(NumericSpec())
    for v in values:
        syn.learn(float(v))
    table = syn.freeze()
    queries = np.concatenate([rng.choice(values, 50), rng.uniform(values.min() - 1, values.max() + 1, 50)])
    got = table.idf(queries)
    want = exact_idf(values, queries, table.h)
    assert np.max(np.abs(got - want)) <= TOLERANCE
    assert table.counts.sum() == n
    assert syn.std() == pytest.approx(np.std(values, ddof=1), rel=1e-6)


def test_bandwidth_is_silverman_by_default_and_configurable():
    rng = np.random.default_rng(0)
    values = rng.normal(0, 2, 1000)
    syn = NumericSynopsis(NumericSpec())
    fixed = NumericSynopsis(NumericSpec(bandwidth=0.25))
    for v in values:
        syn.learn(float(v))
        fixed.learn(float(v))
    assert syn.bandwidth() == pytest.approx(1.06 * np.std(values, ddof=1) * 1000 ** -0.2)
    assert fixed.bandwidth() == 0.25
    assert NumericSynopsis(NumericSpec()).bandwidth() == 0.0  # no data: exact matching


def test_coarsening_keeps_counts_exact_and_idf_close():
    rng = np.random.default_rng(1)
    values = rng.normal(0, 1, 5000)
    syn = NumericSynopsis(NumericSpec(max_bins=64, bandwidth=0.5))
    for v in values:
        syn.learn(float(v))
    assert len(syn.bins) <= 64
    table = syn.freeze()
    assert table.counts.sum() == 5000
    q = np.linspace(-3, 3, 25)
    assert np.max(np.abs(table.idf(q) - exact_idf(values, q, 0.5))) <= TOLERANCE


def test_unlearn_restores_counts_and_moments():
    syn = NumericSynopsis(NumericSpec(warmup=3))
    for v in (1.0, 2.0, 4.0, 8.0, 16.0):
        syn.learn(v)
    syn.learn(3.0, 2)
    syn.unlearn(3.0, 2)
    syn.unlearn(16.0)
    assert syn.n == 4
    assert syn.mean == pytest.approx(3.75)
    assert syn.std() == pytest.approx(np.std([1, 2, 4, 8], ddof=1))
    assert syn.freeze().counts.sum() == 4


def _numeric_stats(values):
    cfg = SimilarityConfig(numeric={"temp": NumericSpec()})
    s = ContextStatistics(cfg)
    s.learn_many([[{"temp": float(v)}] for v in values])
    return s


def test_equal_values_score_highest_and_score_falls_with_distance():
    rng = np.random.default_rng(7)
    s = _numeric_stats(rng.normal(20, 5, 500))
    table = s.table()
    h = table.numeric["temp"].h
    offsets = np.array([0.0, 0.1, 0.3, 0.6, 1.0, 2.0, 4.0]) * h
    past = [[{"temp": 21.0 + d}] for d in offsets]
    chunk = ContextChunk.from_contexts(list(range(len(past))), list(range(len(past))), past, s)
    scores = QueryScorer(table, [{"temp": 21.0}]).score(chunk).scores
    assert scores[0] == pytest.approx(1.0)
    assert np.all(np.diff(scores) < 0)
    # a single numeric value per context: the cosine is the kernel itself
    np.testing.assert_allclose(scores, np.exp(-0.5 * (offsets / h) ** 2), rtol=1e-12)


def test_numeric_and_categorical_terms_mix_as_documented():
    cfg = SimilarityConfig(numeric={"temp": NumericSpec(bandwidth=1.0)})
    s = ContextStatistics(cfg)
    rng = np.random.default_rng(2)
    hist = [[{"host": f"h{i % 5}"}, {"temp": float(rng.normal(20, 3))}] for i in range(200)]
    s.learn_many(hist)
    t = s.table()
    q, p = t.bag([{"host": "h1"}, {"temp": 20.0}]), t.bag([{"host": "h1"}, {"temp": 21.5}])
    wq, wp = t.term_idf("host=h1"), t.term_idf("host=h1")
    nq, np_ = t.numeric["temp"].idf(np.array([20.0]))[0], t.numeric["temp"].idf(np.array([21.5]))[0]
    want = (wq * wp + nq * np_ * math.exp(-0.5 * 1.5**2)) / (math.hypot(wq, nq) * math.hypot(wp, np_))
    assert cosine(q, p, t) == pytest.approx(want, rel=1e-12)
    chunk = ContextChunk.from_contexts([0], [0], [[{"host": "h1"}, {"temp": 21.5}]], s)
    assert QueryScorer(t, q).score(chunk).scores[0] == pytest.approx(want, rel=1e-12)


def test_several_values_of_one_numeric_attribute_follow_the_documented_formula():
    """Every pair of values meets through the kernel in the numerator; the norms hold
    only the squared weights (similarity.idf), so close distinct values can exceed 1."""
    cfg = SimilarityConfig(numeric={"temp": NumericSpec(bandwidth=1.0)})
    s = ContextStatistics(cfg)
    s.learn_many([[{"temp": float(v)}] for v in np.linspace(0, 50, 200)])
    t = s.table()
    a = t.bag([{"temp": 10.0}, {"temp": 10.2}])
    b = t.bag([{"temp": 10.1}, {"temp": 30.0}])
    idf = t.numeric["temp"].idf
    wa, wb = idf(np.array([10.0, 10.2])), idf(np.array([10.1, 30.0]))
    kern = np.exp(-0.5 * (np.array([[10.0], [10.2]]) - np.array([[10.1, 30.0]])) ** 2)
    want = float(wa @ kern @ wb) / (float(np.linalg.norm(wa)) * float(np.linalg.norm(wb)))
    assert cosine(a, b, t) == pytest.approx(want, rel=1e-12)
    chunk = ContextChunk.from_contexts([1], [1], [[{"temp": 10.1}, {"temp": 30.0}]], s)
    assert QueryScorer(t, a).score(chunk).scores[0] == pytest.approx(want, rel=1e-12)
    twins = t.bag([{"temp": 10.0}, {"temp": 10.05}])
    assert cosine(twins, twins, t) > 1.0


def test_one_value_learned_in_batches_has_zero_spread_not_a_math_error():
    """Welford's m2 of one repeated value is 0 in exact arithmetic; in floats, 0.1 learned
    in batches of 3, 4, 5, 3, 2 took it to -4e-18 and std() failed on a square root of a
    negative number (found by the persisted-index hypothesis test)."""
    syn = NumericSynopsis(NumericSpec())
    for count in (3, 4, 5, 3, 2):
        syn.learn(0.1, count)
    assert syn.m2 >= 0.0 and syn.std() == 0.0 and syn.bandwidth() == 0.0
