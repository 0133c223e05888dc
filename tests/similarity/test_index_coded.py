"""similarity.index.build_coded (the wide, dictionary-coded form read with COPY) makes
the same chunk index as similarity.index.build over the long-form rows of the same
tuples: same events, keys, TF per (event, term), numeric entries; null values and tuples
of events outside the chunk count for nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity import NumericSpec, SimilarityConfig
from similarity.errors import SimilarityError
from similarity.index import CodedColumn, build, build_coded
from similarity.vocabulary import Vocabulary

CONFIG = SimilarityConfig(numeric={"load": NumericSpec()})
ATTRS = ("user", "proc", "load")
_value = {"user": st.sampled_from(["alice", "bob", "", None]), "proc": st.sampled_from(["cron", "java", None]),
          "load": st.sampled_from(["0.5", "1", "1.0", "NaN", None])}
_tuple = st.tuples(st.integers(0, 7), *(_value[a] for a in ATTRS))  # event index (>= 5: not in the chunk)


def _tf(ix, vocab):
    m = ix.chunk.tf_sq.sqrt().tocoo()
    return {(ix.chunk.eids[r], vocab.term(c)): v for r, c, v in zip(m.row, m.col, m.data, strict=True)}


def _numeric(ix):
    return {a: sorted(zip(ix.chunk.eids[e.rows].tolist(), e.values.tolist(), e.tf.tolist(), strict=True))
            for a, e in ix.chunk.numeric.items()}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 5), tuples=st.lists(_tuple, max_size=25))
def test_coded_equals_long_form(n, tuples):
    eids = np.asarray([f"e{i}" for i in range(n)], dtype=object)
    ts = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.arange(n), unit="min")
    keys = np.asarray([f"h{i % 2}" if i != 3 else None for i in range(n)], dtype=object)
    long = [(e, t, None, k, "event") for e, t, k in zip(eids, ts, keys, strict=True)]
    for i, *vals in tuples:
        long += [(f"e{i}", ts[0] if n else pd.Timestamp(0, tz="UTC"), a, v, "context:cx")
                 for a, v in zip(ATTRS, vals, strict=True)]
    rows = pd.DataFrame(long, columns=["eid", "ts", "attr", "value", "part"])
    v1, v2 = Vocabulary(), Vocabulary()
    a = build(rows, v1, CONFIG)
    at = pd.Index(eids).get_indexer([f"e{i}" for i, *_ in tuples]) if tuples else np.zeros(0, dtype=np.int64)
    cols = []
    for j, attr in enumerate(ATTRS):
        codes, uniques = pd.factorize(pd.Series([t[1 + j] for t in tuples], dtype=object))
        cols.append(CodedColumn(attr, at, codes, list(uniques)))
    b = build_coded(eids, ts.as_unit("ns").asi8 if n else np.zeros(0, dtype=np.int64), keys, cols, v2, CONFIG)
    assert list(a.chunk.eids) == list(b.chunk.eids)
    assert list(a.chunk.ts) == list(b.chunk.ts)
    assert list(a.keys["key"]) == list(b.keys["key"])
    assert _tf(a, v1) == _tf(b, v2)
    assert _numeric(a) == _numeric(b)
    assert a.contexts == b.contexts


def test_coded_refuses_repeated_event_ids():
    with pytest.raises(SimilarityError, match="distinct"):
        build_coded(np.asarray(["a", "a"], dtype=object), np.zeros(2, dtype=np.int64),
                    np.asarray([None, None], dtype=object), [], Vocabulary())
