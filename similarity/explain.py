"""Why two contexts are similar: the cosine of M 3.5 split into per-term shares.

The cosine's numerator is a sum over shared terms, so each term's part of it is exact:
for a categorical term ``k`` shared by the new context ``q`` and a past one ``p``::

    share_k = w_kq * w_kp / (|q| |p|)

and for a numeric attribute ``a`` (Agrawal's kernel IDF, M 3.5) the sum over its value
pairs ``share_a = sum w_v1 w_v2 K_a(v1, v2) / (|q| |p|)``, shown with the pair that
contributes most: both values and their kernel weight. The shares of all terms add up to
the cosine itself (so the top five add up to at most 1), which is what lets an on-call
engineer read "78 % of the match is user=alice and proc=backup.sh".

>>> from similarity.stats import ContextStatistics
>>> s = ContextStatistics()
>>> s.learn_many([[{"u": "a"}], [{"u": "a"}, {"p": "x"}], [{"u": "b"}, {"p": "x"}], [{"u": "c"}]])
>>> q, p = [{"u": "a"}, {"p": "x"}], [{"u": "a"}, {"p": "x"}, {"u": "z"}]
>>> ex = explain(s.table(), q, p)
>>> [(c.term, round(c.share, 3)) for c in ex.terms]
[('p=x', 0.289), ('u=a', 0.289)]
>>> round(ex.score, 3) == round(sum(c.share for c in ex.terms), 3)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from similarity.idf import IdfTable
from similarity.terms import Context, ContextBag


@dataclass(frozen=True)
class Contribution:
    """One shared term's part of the cosine. For a numeric attribute, ``term`` is the
    attribute and ``value`` / ``past_value`` / ``kernel`` describe its strongest pair."""

    term: str
    share: float
    value: Any = None
    past_value: Any = None
    kernel: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"term": self.term, "share": round(self.share, 6)}
        if self.kernel is not None:
            out.update(value=self.value, past_value=self.past_value, kernel=round(self.kernel, 6))
        return out


@dataclass(frozen=True)
class Explanation:
    """The cosine and every shared term's share of it, largest first."""

    score: float
    terms: tuple[Contribution, ...]

    def top(self, n: int = 5) -> tuple[Contribution, ...]:
        return self.terms[:n]


def explain(table: IdfTable, context: Context | ContextBag, past_context: Context | ContextBag) -> Explanation:
    """Split SIM(context, past_context) under ``table`` (M 3.5) into term shares. Either
    context may be given as its :class:`~similarity.terms.ContextBag` already (a recall
    task explains many past contexts against one new one). ``score`` is computed as
    :func:`similarity.idf.cosine` computes it, from the same weights."""
    q = context if isinstance(context, ContextBag) else table.bag(context)
    p = past_context if isinstance(past_context, ContextBag) else table.bag(past_context)
    wq, wp = table.weights(q), table.weights(p)
    nwq, nwp = table.numeric_weights(q), table.numeric_weights(p)
    nq = math.sqrt(sum(w * w for w in wq.values()) + sum(float(np.dot(w, w)) for _, w in nwq.values()))
    np_ = math.sqrt(sum(w * w for w in wp.values()) + sum(float(np.dot(w, w)) for _, w in nwp.values()))
    if nq == 0 or np_ == 0:
        return Explanation(0.0, ())
    scale = 1.0 / (nq * np_)
    parts = [Contribution(t, w * wp[t] * scale) for t, w in wq.items() if t in wp and w * wp[t] != 0]
    num = sum(w * wp[t] for t, w in wq.items() if t in wp)
    for attr, (v1, x1) in nwq.items():
        if attr not in nwp:
            continue
        v2, x2 = nwp[attr]
        k = table.numeric[attr].kernel(v1[:, None] - v2[None, :])
        num += float(x1 @ k @ x2)
        pair = x1[:, None] * k * x2[None, :] * scale
        total = float(pair.sum())
        if total == 0:
            continue
        i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
        parts.append(Contribution(attr, total, float(v1[i]), float(v2[j]), float(k[i, j])))
    if num <= 0:
        return Explanation(0.0, ())
    return Explanation(num / (nq * np_), tuple(sorted(parts, key=lambda c: (-c.share, c.term))))
