"""The scorer's dot product over a chunk's CSC columns (:func:`similarity.scorer._column_dot`)
is the mat-vec over those columns, added in the same order as one ``np.add.at`` per
column: equal to the last bit, not only close."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity.scorer import _column_dot


def _per_column(m: sp.csc_matrix, n: int, cols: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The reference: one unbuffered ``np.add.at`` per query column, in column order."""
    num = np.zeros(n)
    for j, aj in zip(cols.tolist(), a.tolist(), strict=True):
        lo, hi = m.indptr[j], m.indptr[j + 1]
        np.add.at(num, m.indices[lo:hi], m.data[lo:hi] * aj)
    return num


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30), st.integers(1, 25), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1), st.data())
def test_column_dot_equals_the_per_column_sum_bit_for_bit(n, n_cols, density, seed, data):
    rng = np.random.default_rng(seed)
    m = sp.random(n, n_cols, density=density, format="csc", random_state=rng,
                  data_rvs=lambda k: rng.integers(1, 5, k) / rng.integers(1, 7, k))
    cols = np.asarray(sorted(data.draw(st.sets(st.integers(0, n_cols - 1), max_size=n_cols))), dtype=np.int64)
    a = rng.random(cols.size) * 3.7
    chunk = type("Chunk", (), {"tf": m, "n": n})()
    got = _column_dot(chunk, cols, a)
    assert got.dtype == np.float64 and got.shape == (n,)
    assert got.tolist() == _per_column(m, n, cols, a).tolist()
    np.testing.assert_allclose(got, m[:, cols] @ a if cols.size else np.zeros(n), rtol=1e-12, atol=1e-15)
