"""Terms and bad input: nulls, unknown attributes, empty contexts, non-numeric values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from similarity import (
    ContextChunk,
    ContextStatistics,
    NonNumericValue,
    NumericSpec,
    QueryScorer,
    SearchStatus,
    SimilarityConfig,
    bag_of,
    brute_force,
    cosine,
    search,
)

NUM = SimilarityConfig(numeric={"load": NumericSpec()})


def test_attribute_name_is_part_of_the_term():
    # M footnote 2: the same value under two attributes makes two terms
    assert bag_of([{"user": "x", "proc": "x"}]).terms == {"user=x": 1, "proc=x": 1}


@pytest.mark.parametrize("null", [None, float("nan"), np.float64("nan")])
def test_nulls_are_ignored(null):
    bag = bag_of([{"user": null, "proc": "p"}, {"load": null}], NUM)
    assert bag.terms == {"proc=p": 1} and bag.numeric == {}
    assert bag_of([{"user": null}]).is_empty()


def test_pandas_missing_markers_are_nulls():
    pd = pytest.importorskip("pandas")
    assert bag_of([{"a": pd.NA, "b": pd.NaT, "c": 1}]).terms == {"c=1": 1}


def test_unknown_attributes_are_plain_terms():
    s = ContextStatistics(NUM)
    s.learn_one([{"never_declared": "v", "load": 1.0}])
    assert s.doc_freq("never_declared=v") == 1


@pytest.mark.parametrize("bad", ["high", b"1", True, float("inf"), [1.0]])
def test_non_numeric_value_in_numeric_attribute_names_attribute_and_value(bad):
    s = ContextStatistics(NUM)
    with pytest.raises(NonNumericValue) as err:
        s.learn_one([{"user": "a"}, {"load": bad}])
    assert err.value.attribute == "load" and err.value.value is bad
    assert "'load'" in str(err.value) and repr(bad) in str(err.value)
    assert isinstance(err.value, ValueError)
    assert s.events == 0 and s.doc_freq("user=a") == 0  # nothing was counted


def test_empty_contexts_score_zero_without_dividing_by_zero():
    s = ContextStatistics()
    past = [[{"u": "a"}], [], [{"u": None}]]
    s.learn_many(past)
    chunk = ContextChunk.from_contexts([1, 2, 3], [1.0, 2.0, 3.0], past, s)
    s.learn_one([])
    t = s.table()
    with np.errstate(all="raise"):
        scores = QueryScorer(t, [{"u": "a"}]).score(chunk).scores
        empty = QueryScorer(t, [])
        assert empty.score(chunk).scores.tolist() == [0.0, 0.0, 0.0]
    assert scores[1] == 0.0 and scores[2] == 0.0 and scores[0] > 0
    assert empty.status is SearchStatus.EMPTY_QUERY
    assert cosine(t.bag([]), t.bag([{"u": "a"}]), t) == 0.0
    result = search(t, [], [chunk], k=3)
    assert result.status is SearchStatus.EMPTY_QUERY and result.neighbours == ()


def test_event_type_without_history_gives_empty_result_with_status():
    s = ContextStatistics(event_type="never_seen")
    for fn in (search, brute_force):
        r = fn(s.table(), [{"u": "a"}], [], k=5)
        assert r.status is SearchStatus.NO_HISTORY and r.neighbours == ()
    s.learn_one([{"u": "a"}])  # the new event itself, but no past chunk
    r = search(s.table(), [{"u": "a"}], [], k=5)
    assert r.status is SearchStatus.NO_HISTORY


def test_a_term_in_every_context_weighs_nothing():
    s = ContextStatistics()
    s.learn_many([[{"site": "x"}], [{"site": "x"}]])
    t = s.table()
    assert t.term_idf("site=x") == 0.0
    assert QueryScorer(t, [{"site": "x"}]).status is SearchStatus.EMPTY_QUERY


def test_unseen_query_term_gets_the_largest_idf():
    s = ContextStatistics()
    s.learn_many([[{"u": "a"}]] * 4)
    t = s.table()
    assert t.term_idf("u=never") == pytest.approx(math.log(4))


def test_a_bag_with_an_undeclared_numeric_attribute_is_refused_before_counting():
    from similarity import ContextBag, SimilarityError

    s = ContextStatistics()
    with pytest.raises(SimilarityError, match="'load'"):
        s.learn_many([ContextBag(terms={"u=a": 1}), ContextBag(numeric={"load": {1.0: 1}})])
    assert s.events == 0 and s.doc_freq("u=a") == 0


def test_chunk_inputs_are_checked():
    import scipy.sparse as sp

    from similarity import SimilarityError

    with pytest.raises(SimilarityError, match="2 rows for 3 eids"):
        ContextChunk.from_tf([1, 2, 3], [1, 2, 3], sp.csr_matrix((2, 4)))
    with pytest.raises(SimilarityError, match="timestamps"):
        ContextChunk.from_tf([1], ["yesterday"], sp.csr_matrix((1, 4)))
    with pytest.raises(SimilarityError, match="differ in length"):
        ContextChunk.from_contexts([1, 2], [1], [[{"u": "a"}], [{"u": "b"}]], ContextStatistics())
