"""Context similarity for Similarity Recall (M 3.3-3.5, 4.5.2). Pure: no I/O.

- :class:`ContextStatistics` (learn_one / learn_many / unlearn_one / table / snapshot /
  restore): per event type E, C_k, vocabulary and numeric synopses;
- :class:`IdfTable` and :func:`cosine`: frozen weights and the reference cosine;
- :class:`ContextChunk`: a chunk of past contexts as a sparse TF matrix;
- :class:`QueryScorer`: a new context scored against chunks, vectorised;
- :class:`TopK`: the best k across chunks, with inserted / displaced reports;
- :func:`search` / :func:`brute_force`: one-call versions.
"""

from similarity.chunk import ContextChunk, NumericEntries
from similarity.config import NumericSpec, SimilarityConfig
from similarity.errors import (
    InvalidSimilarityConfig,
    NonNumericValue,
    NotLearned,
    SimilarityError,
    SnapshotError,
)
from similarity.idf import IdfTable, cosine
from similarity.scorer import ChunkScores, QueryScorer, SearchStatus
from similarity.search import SearchResult, brute_force, search
from similarity.stats import SNAPSHOT_VERSION, ContextStatistics
from similarity.terms import Context, ContextBag, bag_of, term
from similarity.topk import Neighbour, TopK, top_k
from similarity.vocabulary import Vocabulary

__all__ = [
    "SNAPSHOT_VERSION",
    "ChunkScores",
    "Context",
    "ContextBag",
    "ContextChunk",
    "ContextStatistics",
    "IdfTable",
    "InvalidSimilarityConfig",
    "Neighbour",
    "NonNumericValue",
    "NotLearned",
    "NumericEntries",
    "NumericSpec",
    "QueryScorer",
    "SearchResult",
    "SearchStatus",
    "SimilarityConfig",
    "SimilarityError",
    "SnapshotError",
    "TopK",
    "Vocabulary",
    "bag_of",
    "brute_force",
    "cosine",
    "search",
    "term",
    "top_k",
]
