"""Vectorised scoring of one new event's context against chunks of history (M 3.5, 4.5.2).

A :class:`QueryScorer` holds one new event's context weighted with one frozen
:class:`~similarity.idf.IdfTable`; :meth:`QueryScorer.score` gives the cosine (exactly
the formula of :mod:`similarity.idf`) of that context with every row of a
:class:`~similarity.chunk.ContextChunk`, with scipy sparse / numpy array algebra and no
Python loop over events:

- dot products: only the new context's columns of the chunk's CSC TF matrix, times
  ``IDF_k * w_k,query`` (``w_k,past = TF * IDF_k``), those columns' contiguous slices
  summed by one ``np.bincount``;
- norms: ``TF^2 @ IDF^2`` over all columns the chunk has (the *current* IDF, padded for
  columns newer than the table), plus the numeric terms. They depend only on the table,
  so they are remembered on the chunk for the table's ``token``: every event scored
  with the same table (e.g. all events between two learns) reuses them;
- numeric attributes: per entry ``w = TF * IDF_a(value)`` and, per query value ``u``,
  ``bincount(rows, w * w_u * K(value - u))``.

Scores are 0 where the dot product is 0, so empty contexts and zero norms never divide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from similarity.chunk import ContextChunk
from similarity.idf import IdfTable
from similarity.terms import Context, ContextBag


class SearchStatus(StrEnum):
    """Why a search may return nothing."""

    OK = "ok"
    NO_HISTORY = "no_history"
    """No event of this type was learned (E = 0), or no past event was scored."""
    EMPTY_QUERY = "empty_query"
    """The new context has no term with positive weight: nothing can be similar."""


@dataclass(frozen=True, eq=False)
class ChunkScores:
    """Cosine of the new context with each past event of one chunk."""

    eids: np.ndarray
    ts: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])


@dataclass(frozen=True, eq=False)
class _Prepared:
    """What depends on (chunk, table) only: squared norms and numeric past weights."""

    norm_sq: np.ndarray
    numeric_w: dict[str, np.ndarray]


class QueryScorer:
    """One new event's context, weighted once, scored against any number of chunks.

    >>> from similarity.stats import ContextStatistics
    >>> s = ContextStatistics()
    >>> past = [[{"u": "a"}, {"p": "x"}], [{"u": "b"}], [{"u": "c"}, {"p": "x"}]]
    >>> s.learn_many(past)
    >>> chunk = ContextChunk.from_contexts([1, 2, 3], [10, 20, 30], past, s)
    >>> s.learn_one([{"u": "a"}])
    >>> q = QueryScorer(s.table(), [{"u": "a"}])
    >>> [round(float(x), 3) for x in q.score(chunk).scores]
    [0.707, 0.0, 0.0]
    """

    def __init__(self, table: IdfTable, context: Context | ContextBag) -> None:
        self.table = table
        bag = context if isinstance(context, ContextBag) else table.bag(context)
        self.bag = bag
        cols, weights, unknown_sq = [], [], 0.0
        for t, tf in bag.terms.items():
            col = table.vocabulary.index(t)
            if col is None or col >= table.idf.shape[0]:
                unknown_sq += (tf * table.unknown_idf) ** 2
            else:
                cols.append(col)
                weights.append(tf * float(table.idf[col]))
        order = np.argsort(np.asarray(cols, dtype=np.int64), kind="stable")
        self._cols = np.asarray(cols, dtype=np.int64)[order]
        self._w = np.asarray(weights, dtype=np.float64)[order]
        # the query's weights times IDF, per column (every column here is within the table):
        # what each chunk's dot product multiplies its TF by, computed once per query
        self._a = table.idf[self._cols] * self._w if self._cols.size else self._w
        self._numeric = table.numeric_weights(bag)
        norm_sq = float(self._w @ self._w) + unknown_sq
        norm_sq += sum(float(w @ w) for _, w in self._numeric.values())
        self.norm = math.sqrt(norm_sq)

    @property
    def status(self) -> SearchStatus:
        if self.table.events == 0:
            return SearchStatus.NO_HISTORY
        if self.norm == 0:
            return SearchStatus.EMPTY_QUERY
        return SearchStatus.OK

    def _prepared(self, chunk: ContextChunk) -> _Prepared:
        held = chunk.memo(self.table.token)
        if held is not None:
            return held
        norm_sq = chunk.tf_sq @ self.table.idf_sq_for_columns(chunk.n_cols) if chunk.n_cols else np.zeros(chunk.n)
        numeric_w = {}
        for attr, entries in chunk.numeric.items():
            table = self.table.numeric.get(attr)
            if table is None or entries.rows.size == 0:
                continue
            w = entries.tf * table.idf(entries.values)
            numeric_w[attr] = w
            norm_sq = norm_sq + np.bincount(entries.rows, weights=w * w, minlength=chunk.n)
        prepared = _Prepared(np.asarray(norm_sq, dtype=np.float64), numeric_w)
        chunk.remember(self.table.token, prepared)
        return prepared

    def dot(self, chunk: ContextChunk) -> np.ndarray:
        """The numerator of the cosine for every row of ``chunk``."""
        num = np.zeros(chunk.n)
        if self._cols.size:
            if self._cols[-1] < chunk.n_cols:  # sorted: every query column is in the chunk's range
                num = _column_dot(chunk, self._cols, self._a)
            else:
                keep = self._cols < chunk.n_cols
                if keep.any():
                    num = _column_dot(chunk, self._cols[keep], self._a[keep])
        if self._numeric:
            prepared = self._prepared(chunk)
            for attr, (qv, qw) in self._numeric.items():
                entries = chunk.numeric.get(attr)
                if entries is None or attr not in prepared.numeric_w:
                    continue
                pw = prepared.numeric_w[attr]
                kern = self.table.numeric[attr].kernel
                for u, wu in zip(qv, qw, strict=True):
                    num = num + np.bincount(
                        entries.rows, weights=pw * (wu * kern(entries.values - u)), minlength=chunk.n
                    )
        return np.asarray(num, dtype=np.float64)

    def score(self, chunk: ContextChunk) -> ChunkScores:
        """Cosine (M 3.5) of the new context with every past event in ``chunk``."""
        scores = np.zeros(chunk.n)
        if chunk.n and self.norm > 0:
            num = self.dot(chunk)
            denom = np.sqrt(self._prepared(chunk).norm_sq)
            denom *= self.norm
            np.divide(num, denom, out=scores, where=num > 0)
        return ChunkScores(eids=chunk.eids, ts=chunk.ts, scores=scores)


def _column_dot(chunk: ContextChunk, cols: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``chunk.tf[:, cols] @ a`` reading only those columns of the CSC arrays.

    The columns' contiguous slices are gathered into one position array (no Python
    loop) and summed by one ``np.bincount``, which adds each row's terms in column
    order, exactly as a CSC mat-vec would (and as the loop of one ``np.add.at`` per
    query term did, to the last bit). One call a chunk, not one a term, matters in the
    engine's driver: ``ufunc.at`` gives up the GIL on every call, and Spark's threads
    contend for it."""
    m = chunk.tf
    lo = m.indptr[cols]
    lens = m.indptr[cols + 1] - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(chunk.n)
    # entry positions lo_j .. hi_j - 1 of every column, columns in the order given
    pos = np.arange(total) + np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return np.bincount(m.indices[pos], weights=m.data[pos] * np.repeat(a, lens), minlength=chunk.n)
