"""One-call similarity search: the whole of M 3.5 + 4.5.2 for callers that hold all
chunks at once (tests, batch tools). The Similarity Recall operator instead keeps a
:class:`~similarity.scorer.QueryScorer` and a :class:`~similarity.topk.TopK` per event
and feeds chunks as the Recall Manager delivers them.

>>> from similarity.stats import ContextStatistics
>>> s = ContextStatistics()
>>> search(s.table(), [{"u": "a"}], [], k=3).status.value
'no_history'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from similarity.chunk import ContextChunk
from similarity.idf import IdfTable
from similarity.scorer import QueryScorer, SearchStatus
from similarity.terms import Context, ContextBag
from similarity.topk import Neighbour, TopK, top_k


@dataclass(frozen=True)
class SearchResult:
    """The best ``k`` past events, best first, and why the list may be empty."""

    status: SearchStatus
    neighbours: tuple[Neighbour, ...]


def search(table: IdfTable, context: Context | ContextBag, chunks: Sequence[ContextChunk], k: int) -> SearchResult:
    """Chunk by chunk, in the order given (newest first in Moirae), through :class:`TopK`."""
    scorer = QueryScorer(table, context)
    tracker = TopK(k)
    status = _status(scorer, sum(c.n for c in chunks))
    if status is SearchStatus.OK:
        for chunk in chunks:
            tracker.offer(scorer.score(chunk))
    return SearchResult(status, tracker.items)


def _status(scorer: QueryScorer, past_events: int) -> SearchStatus:
    """NO_HISTORY when there is no past event to compare with, before EMPTY_QUERY."""
    return SearchStatus.NO_HISTORY if past_events == 0 else scorer.status


def brute_force(table: IdfTable, context: Context | ContextBag, chunks: Sequence[ContextChunk], k: int) -> SearchResult:
    """All history in one matrix, scored in one shot, fully sorted: the reference for
    the invariant "after all chunks, the top-k equals the brute-force top-k"
    (docs/ARCHITECTURE.md)."""
    scorer = QueryScorer(table, context)
    whole = ContextChunk.concat(chunks)
    status = _status(scorer, whole.n)
    return SearchResult(status, top_k(scorer.score(whole), k))
