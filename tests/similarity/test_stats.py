"""ContextStatistics: E and C_k (M 3.5), incremental == batch, unlearn, snapshots."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import (
    ContextStatistics,
    NotLearned,
    NumericSpec,
    SimilarityConfig,
    SnapshotError,
    bag_of,
)
from tests.similarity.sim_strategies import contexts

NUM = SimilarityConfig(numeric={"load": NumericSpec(warmup=4)})


def _oracle(ctxs):
    """C_k counted directly: contexts containing each term."""
    c: Counter[str] = Counter()
    for ctx in ctxs:
        c.update({f"{a}={v}" for row in ctx for a, v in row.items() if v is not None})
    return c


@settings(max_examples=60, deadline=None)
@given(contexts)
def test_incremental_equals_batch_equals_direct_count(ctxs):
    one = ContextStatistics()
    for ctx in ctxs:
        one.learn_one(ctx)
    batch = ContextStatistics()
    batch.learn_many(ctxs)
    assert one.snapshot() == batch.snapshot()
    assert one.events == len(ctxs)
    assert {t: one.doc_freq(t) for t in one.vocabulary.terms()} == dict(_oracle(ctxs))
    np.testing.assert_array_equal(one.table().idf, batch.table().idf)


@settings(max_examples=40, deadline=None)
@given(contexts, st.lists(st.floats(-100, 100), min_size=1, max_size=40))
def test_incremental_equals_batch_with_numeric(ctxs, loads):
    ctxs = [ctx + [{"load": loads[i % len(loads)]}] for i, ctx in enumerate(ctxs)]
    one = ContextStatistics(NUM)
    for ctx in ctxs:
        one.learn_one(ctx)
    batch = ContextStatistics(NUM)
    batch.learn_many(ctxs)
    assert one.snapshot() == batch.snapshot()
    assert one.numeric["load"].n == len(ctxs)


@settings(max_examples=40, deadline=None)
@given(contexts, contexts)
def test_unlearn_is_the_inverse_of_learn(keep, drop):
    s = ContextStatistics()
    s.learn_many(keep)
    base = s.snapshot()
    s.learn_many(drop)
    for ctx in reversed(drop):
        s.unlearn_one(ctx)
    after = s.snapshot()
    # the vocabulary keeps columns of dropped terms, with C_k = 0
    n = len(base["terms"])
    assert after["events"] == base["events"]
    assert after["terms"][:n] == base["terms"] and after["doc_freq"][:n] == base["doc_freq"]
    assert all(c == 0 for c in after["doc_freq"][n:])


def test_unlearn_of_a_context_never_learned_names_the_term_and_changes_nothing():
    s = ContextStatistics()
    s.learn_one([{"user": "a"}])
    before = s.snapshot()
    with pytest.raises(NotLearned, match="user=zz"):
        s.unlearn_one([{"user": "a"}, {"user": "zz"}])
    assert s.snapshot() == before


def test_tf_counts_within_a_context_but_c_k_counts_contexts():
    s = ContextStatistics()
    s.learn_one([{"p": "x"}, {"p": "x"}, {"p": "x"}])
    assert bag_of([{"p": "x"}, {"p": "x"}]).terms == {"p=x": 2}
    assert s.doc_freq("p=x") == 1 and s.events == 1


def test_snapshot_is_json_and_restores_the_same_weights():
    s = ContextStatistics(NUM, event_type="overload")
    rng = np.random.default_rng(3)
    for i in range(50):
        s.learn_one([{"user": f"u{i % 7}"}, {"load": float(rng.normal(10, 2))}])
    data = json.loads(json.dumps(s.snapshot()))
    r = ContextStatistics.restore(data)
    assert r.event_type == "overload" and r.config == s.config
    assert r.snapshot() == s.snapshot()
    np.testing.assert_array_equal(r.table().idf, s.table().idf)
    vals = np.array([5.0, 10.0, 12.5])
    np.testing.assert_allclose(r.table().numeric["load"].idf(vals), s.table().numeric["load"].idf(vals))
    r.learn_one([{"user": "u1"}])  # a restored state keeps learning
    assert r.doc_freq("user=u1") == s.doc_freq("user=u1") + 1


def test_restore_checks_kind_and_version():
    snap = ContextStatistics().snapshot()
    with pytest.raises(SnapshotError, match="version 99"):
        ContextStatistics.restore({**snap, "version": 99})
    with pytest.raises(SnapshotError, match="kind"):
        ContextStatistics.restore({**snap, "kind": "something else"})
    with pytest.raises(SnapshotError, match="doc_freq"):
        ContextStatistics.restore({**snap, "terms": ["a=b"], "doc_freq": []})


def test_table_is_cached_until_the_next_learn():
    s = ContextStatistics()
    s.learn_one([{"u": "a"}])
    t1 = s.table()
    assert s.table() is t1
    s.learn_one([{"u": "b"}])
    t2 = s.table()
    assert t2 is not t1 and t2.token != t1.token
    assert t1.events == 1 and t2.events == 2  # a frozen table does not move


def test_smooth_idf_option_weighs_common_terms_and_round_trips():
    """SimilarityConfig(idf="smooth"): log((1 + E) / (1 + C_k)) + 1, so a term in every
    context still weighs 1; the option survives a snapshot; a bad value names itself."""
    import math

    import pytest

    from similarity import ContextStatistics, InvalidSimilarityConfig, SimilarityConfig

    s = ContextStatistics(SimilarityConfig(idf="smooth"))
    s.learn_many([[{"u": "a"}, {"p": "x"}], [{"u": "b"}, {"p": "x"}], [{"u": "a"}, {"p": "x"}]])
    t = s.table()
    assert t.term_idf("p=x") == pytest.approx(1.0)
    assert t.term_idf("u=b") == pytest.approx(math.log(4 / 2) + 1)
    assert t.unknown_idf == pytest.approx(math.log(4) + 1)
    assert ContextStatistics.restore(s.snapshot()).table().term_idf("u=b") == pytest.approx(t.term_idf("u=b"))
    assert ContextStatistics().table().config.idf == "paper"
    with pytest.raises(InvalidSimilarityConfig, match="bm99"):
        SimilarityConfig(idf="bm99")


def test_restore_under_a_config_takes_its_idf_and_refuses_another_declaration():
    """A snapshot saved under the paper's IDF continues under a configured smooth IDF (the
    counts do not depend on it); a changed numeric declaration is refused by name."""
    import math

    s = ContextStatistics(NUM)
    s.learn_many([[{"u": "a"}, {"load": 1.0}], [{"u": "b"}, {"load": 2.0}], [{"u": "a"}, {"load": 3.0}]])
    smooth = SimilarityConfig(numeric=NUM.numeric, idf="smooth")
    r = ContextStatistics.restore(s.snapshot(), config=smooth)
    assert r.config == smooth and r.events == s.events
    assert r.table().term_idf("u=b") == pytest.approx(math.log(4 / 2) + 1)
    assert s.table().term_idf("u=b") == pytest.approx(math.log(3 / 1))  # the saved flavour, without config
    with pytest.raises(SnapshotError, match="learned under"):
        ContextStatistics.restore(s.snapshot(), config=SimilarityConfig(numeric={"load": NumericSpec(warmup=9)}))
