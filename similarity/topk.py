"""Top-k merging across chunks for one new event (M 4.5.2).

M 4.5.2: "For each chunk of historical data, the Similarity Recall sorts the resulting
events on their scores and outputs the top-k events. As it processes increasingly older
chunks, the Similarity Recall operator filters out events less relevant than the ones
already produced, by keeping track of the top k events produced for each alert."

:class:`TopK` is that tracker. :meth:`TopK.offer` takes one chunk's scores and returns
which past events entered the top k and which were pushed out, so the operator can emit
inserts and delete-revisions (M 4.6).

**Order** (the same everywhere, including :func:`top_k`, the brute force): score
descending, then past event timestamp descending (the more recent wins), then eid
ascending. eids must be mutually comparable (all numbers or all strings). Past events
with score 0 share no weighted term with the new event and are never reported.

An eid already held is ignored when offered again (re-offering a chunk changes nothing);
an eid that was displaced cannot come back, since everything above it stays above it.

>>> t = TopK(2)
>>> t.offer(ChunkScores(np.array([1, 2, 3]), np.array([10, 20, 30]), np.array([0.5, 0.9, 0.5])))
((Neighbour(eid=2, ts=20, score=0.9), Neighbour(eid=3, ts=30, score=0.5)), ())
>>> t.offer(ChunkScores(np.array([4]), np.array([5]), np.array([0.7])))
((Neighbour(eid=4, ts=5, score=0.7),), (Neighbour(eid=3, ts=30, score=0.5),))
>>> [n.eid for n in t.items]
[2, 4]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from similarity.errors import InvalidSimilarityConfig
from similarity.scorer import ChunkScores


@dataclass(frozen=True)
class Neighbour:
    """One similar past event: its id, timestamp and cosine with the new event."""

    eid: Any
    ts: Any
    score: float

    def key(self) -> tuple[float, Any, Any]:
        """Sort key: best first (module doc)."""
        return (-self.score, -self.ts, self.eid)


def _candidates(scores: ChunkScores, k: int) -> list[Neighbour]:
    """Every positive-score row that could be among the chunk's best k: scores at or
    above the k-th largest (all ties kept, the full order decides among them)."""
    s = scores.scores
    idx = np.flatnonzero(s > 0)
    if idx.size > k:
        kth = -np.partition(-s[idx], k - 1)[k - 1]
        idx = idx[s[idx] >= kth]
    return [
        Neighbour(eid=e, ts=t, score=x)
        for e, t, x in zip(scores.eids[idx].tolist(), scores.ts[idx].tolist(), s[idx].tolist(), strict=True)
    ]


def top_k(scores: ChunkScores, k: int) -> tuple[Neighbour, ...]:
    """The best ``k`` of one set of scores, in the order of the module doc (brute force)."""
    cands = sorted(_candidates(scores, k), key=Neighbour.key)
    out: list[Neighbour] = []
    seen: set[Any] = set()
    for n in cands:
        if n.eid not in seen:
            seen.add(n.eid)
            out.append(n)
            if len(out) == k:
                break
    return tuple(out)


class TopK:
    """The best ``k`` past events found so far for one new event."""

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InvalidSimilarityConfig(f"TopK: k must be an integer >= 1, got {k!r}")
        self.k = k
        self._items: tuple[Neighbour, ...] = ()
        self.offered = 0
        """Rows offered so far (all chunks)."""

    @property
    def items(self) -> tuple[Neighbour, ...]:
        """The current top k, best first."""
        return self._items

    def offer(self, scores: ChunkScores) -> tuple[tuple[Neighbour, ...], tuple[Neighbour, ...]]:
        """Merge one chunk's scores; return ``(inserted, displaced)``, each best first."""
        self.offered += len(scores)
        held = {n.eid for n in self._items}
        fresh = [n for n in _candidates(scores, self.k) if n.eid not in held]
        if not fresh:
            return (), ()
        merged: list[Neighbour] = []
        seen: set[Any] = set()
        for n in sorted([*self._items, *fresh], key=Neighbour.key):
            if n.eid not in seen:
                seen.add(n.eid)
                merged.append(n)
                if len(merged) == self.k:
                    break
        new = tuple(merged)
        kept = {n.eid for n in new}
        inserted = tuple(n for n in new if n.eid not in held)
        displaced = tuple(n for n in self._items if n.eid not in kept)
        self._items = new
        return inserted, displaced

    def offer_many(self, chunks: Iterable[ChunkScores]) -> tuple[Neighbour, ...]:
        """Offer several chunks in order; return the final top k."""
        for c in chunks:
            self.offer(c)
        return self._items
