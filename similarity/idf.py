"""TF-IDF weights and the reference cosine similarity (M 3.5).

An :class:`IdfTable` is a frozen view of one event type's statistics at one moment: the
IDF of every vocabulary term and one :class:`~similarity.synopsis.NumericTable` per
numeric attribute. A recall task scores every chunk of history with the *same* table,
which is what makes the chunked top-k equal the brute-force top-k (docs/ARCHITECTURE.md).

Weights (M 3.5)::

    IDF_k = log(E / C_k)          w_kc = TF_kc * IDF_k

with two conventions where the formula is undefined: ``E`` is read as ``max(E, 1)`` and
``C_k`` as ``max(C_k, 1)``. A term never counted (``C_k = 0``: not in the vocabulary, or
only in history that was never learned) therefore gets the largest IDF, ``log E``, as if
the context holding it were the one that counted it; an empty history gives IDF 0.

**Cosine (M 3.5), with numeric attributes.** For contexts ``c1``, ``c2``::

    SIM = N / (|c1| |c2|)
    N     = sum_k w_kc1 w_kc2                                   (categorical terms)
          + sum_a sum_{v1 in c1.a} sum_{v2 in c2.a} w_v1 w_v2 K_a(v1, v2)   (numeric)
    |c|^2 = sum_k w_kc^2 + sum_a sum_{v in c.a} w_v^2

where for a numeric attribute ``a`` each distinct value ``v`` of the context is one
term with ``w_v = TF_v * IDF_a(v)`` (Agrawal et al.'s generalised IDF, see
:mod:`similarity.synopsis`) and ``K_a`` the Gaussian kernel with the attribute's
bandwidth (M 3.5). Equal values meet with weight 1, distant ones with less. The norms
are those of the categorical formula, as M 3.5 writes them. With at most one value per
numeric attribute per context (a reading "at the time of the event") the score lies in
[0, 1]; a context holding several *close but distinct* values of one numeric attribute
can score above 1 against another, because cross pairs enter the numerator and not the
norms. A zero norm (empty context, or only terms present in every context) gives 0.

>>> from similarity.stats import ContextStatistics
>>> s = ContextStatistics()
>>> s.learn_many([[{"u": "a"}], [{"u": "a"}, {"p": "x"}], [{"u": "b"}, {"p": "x"}]])
>>> t = s.table()
>>> round(cosine(t.bag([{"u": "a"}, {"p": "x"}]), t.bag([{"u": "b"}, {"p": "x"}]), t), 4)
0.2448
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from similarity.config import SimilarityConfig
from similarity.synopsis import NumericTable
from similarity.terms import Context, ContextBag, bag_of
from similarity.vocabulary import Vocabulary


@dataclass(frozen=True, eq=False)
class IdfTable:
    """IDF of one event type, frozen at one moment. Obtain it from
    :meth:`ContextStatistics.table`; ``token`` identifies it (for per-table caches)."""

    token: int
    events: int
    """E: the number of events (contexts) of this type learned."""
    idf: np.ndarray
    """IDF by vocabulary column, for the first ``len(idf)`` terms (read-only)."""
    vocabulary: Vocabulary
    config: SimilarityConfig
    numeric: Mapping[str, NumericTable] = field(default_factory=dict)

    @property
    def unknown_idf(self) -> float:
        """IDF of a term with ``C_k = 0``: ``log max(E, 1)`` (``log(1 + E) + 1`` with
        ``idf: smooth``)."""
        if self.config.idf == "smooth":
            return (math.log(1 + self.events) + 1.0) / math.log(self.config.log_base)
        return math.log(max(self.events, 1)) / math.log(self.config.log_base)

    def term_idf(self, term: str) -> float:
        col = self.vocabulary.index(term)
        if col is None or col >= self.idf.shape[0]:
            return self.unknown_idf
        return float(self.idf[col])

    def idf_for_columns(self, n_cols: int) -> np.ndarray:
        """IDF of columns ``0..n_cols-1``; columns added to the vocabulary after this
        table was frozen get :attr:`unknown_idf` (they had ``C_k = 0`` then)."""
        have = self.idf.shape[0]
        if n_cols <= have:
            return self.idf[:n_cols]
        return np.concatenate([self.idf, np.full(n_cols - have, self.unknown_idf)])

    @cached_property
    def idf_sq(self) -> np.ndarray:
        """``idf ** 2``, computed once per table (the norms need it for every chunk)."""
        sq = self.idf * self.idf
        sq.setflags(write=False)
        return sq

    def idf_sq_for_columns(self, n_cols: int) -> np.ndarray:
        """:meth:`idf_for_columns` squared."""
        have = self.idf.shape[0]
        if n_cols <= have:
            return self.idf_sq[:n_cols]
        return np.concatenate([self.idf_sq, np.full(n_cols - have, self.unknown_idf**2)])

    def bag(self, context: Context) -> ContextBag:
        """The context's :class:`ContextBag` under this event type's config."""
        return bag_of(context, self.config)

    def weights(self, bag: ContextBag) -> dict[str, float]:
        """Categorical weights ``TF * IDF`` of a bag's terms (M 3.5)."""
        return {t: tf * self.term_idf(t) for t, tf in bag.terms.items()}

    def numeric_weights(self, bag: ContextBag) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per numeric attribute: (distinct values, weights TF * generalised IDF)."""
        out = {}
        for attr, values in bag.numeric.items():
            table = self.numeric.get(attr)
            if table is None or not values:
                continue
            v = np.fromiter(values.keys(), dtype=np.float64, count=len(values))
            tf = np.fromiter(values.values(), dtype=np.float64, count=len(values))
            out[attr] = (v, tf * table.idf(v))
        return out

    def norm(self, bag: ContextBag) -> float:
        """``|c|`` as in the module doc."""
        sq = sum(w * w for w in self.weights(bag).values())
        sq += sum(float(np.dot(w, w)) for _, w in self.numeric_weights(bag).values())
        return math.sqrt(sq)


def cosine(bag1: ContextBag, bag2: ContextBag, table: IdfTable) -> float:
    """SIM(c1, c2) of M 3.5 (module doc), one pair at a time: the reference the
    vectorised scorer is tested against."""
    w1, w2 = table.weights(bag1), table.weights(bag2)
    num = sum(w * w2[t] for t, w in w1.items() if t in w2)
    n1, n2 = table.numeric_weights(bag1), table.numeric_weights(bag2)
    for attr, (v1, x1) in n1.items():
        if attr in n2:
            v2, x2 = n2[attr]
            num += float(x1 @ table.numeric[attr].kernel(v1[:, None] - v2[None, :]) @ x2)
    if num <= 0:
        return 0.0
    return num / (table.norm(bag1) * table.norm(bag2))
