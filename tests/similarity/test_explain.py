"""Explanations: every shared term's share of the cosine, exactly (M 3.5)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import ContextStatistics, NumericSpec, SimilarityConfig, cosine
from similarity.explain import explain
from tests.similarity.sim_strategies import context, contexts


@settings(max_examples=200, deadline=None)
@given(contexts, context, context)
def test_term_shares_sum_to_the_cosine(history, new, past):
    stats = ContextStatistics()
    stats.learn_many([*history, past])
    stats.learn_one(new)
    table = stats.table()
    ex = explain(table, new, past)
    assert abs(sum(c.share for c in ex.terms) - ex.score) <= 1e-9
    assert abs(ex.score - cosine(table.bag(new), table.bag(past), table)) <= 1e-12
    assert sum(c.share for c in ex.top(5)) <= 1.0 + 1e-12
    assert all(a.share >= b.share for a, b in zip(ex.terms, ex.terms[1:], strict=False))
    shared = set(table.bag(new).terms) & set(table.bag(past).terms)
    assert {c.term for c in ex.terms} <= shared


values = st.floats(0, 100, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(st.lists(values, min_size=2, max_size=40), values, values, st.sampled_from(["a", "b"]))
def test_numeric_attributes_show_both_values_and_their_kernel_weight(history, v_new, v_past, user):
    cfg = SimilarityConfig(numeric={"load": NumericSpec()})
    stats = ContextStatistics(cfg)
    stats.learn_many([[{"load": v}, {"user": "a" if i % 2 else "b"}] for i, v in enumerate(history)])
    new, past = [{"load": v_new}, {"user": user}], [{"load": v_past}, {"user": "a"}]
    stats.learn_one(new)
    table = stats.table()
    ex = explain(table, new, past)
    assert abs(sum(c.share for c in ex.terms) - ex.score) <= 1e-9
    load = [c for c in ex.terms if c.term == "load"]
    if load:
        (c,) = load
        assert (c.value, c.past_value) == (v_new, v_past)
        assert np.isclose(c.kernel, float(table.numeric["load"].kernel(v_new - v_past)))
        assert c.to_json()["kernel"] == round(c.kernel, 6)


def test_nothing_shared_explains_nothing():
    stats = ContextStatistics()
    stats.learn_many([[{"u": "a"}], [{"u": "b"}]])
    ex = explain(stats.table(), [{"u": "a"}], [{"u": "b"}])
    assert ex.score == 0.0 and ex.terms == ()
