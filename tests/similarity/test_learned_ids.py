"""The learned event ids of a Similarity Recall, 8 bytes each (similarity.learned): the
same answers as a Python set of the ids across merges of the pending hashes, and memory
that grows by the array, not by Python objects."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import learned
from similarity.learned import LearnedIds

_ids = st.lists(st.text(min_size=0, max_size=12), max_size=60)


@settings(max_examples=150, deadline=None)
@given(first=_ids, adds=_ids, probes=_ids, merge_at=st.integers(1, 8))
def test_it_answers_as_a_set_of_the_ids_across_merges(first, adds, probes, merge_at):
    old = learned.MERGE_AT
    learned.MERGE_AT = merge_at  # merges after every few additions
    try:
        ids, ref = LearnedIds(first), set(first)
        for e in adds:
            assert ids.add(e) == (e not in ref), e
            ref.add(e)
            assert len(ids) == len(ref)
        copy = ids.copy()
        ids.update(first + adds)  # a restore over ids it holds: none is added twice
        assert len(ids) == len(ref)
        for e in probes + first + adds:
            assert (e in ids) == (e in ref), e
        assert copy.add("\x00new") and "\x00new" not in ids  # a copy is apart
    finally:
        learned.MERGE_AT = old


def test_a_million_ids_take_8_bytes_each():
    ids = LearnedIds(f"metrics:s{i % 1000}:{i}" for i in range(1_000_000))
    for i in range(70_000):  # past one merge of the pending hashes
        assert ids.add(f"live:{i}")
    assert len(ids) == 1_070_000
    assert ids.nbytes <= 9 * len(ids) + 64 * learned.MERGE_AT
    assert "metrics:s7:7" in ids and "live:69999" in ids and "metrics:s7:8" not in ids
