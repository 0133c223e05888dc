"""Context similarity for Similarity Recall (M 3.3-3.5, 4.5.2). Pure: no I/O.

- :class:`ContextStatistics` (learn_one / learn_many / unlearn_one / table / snapshot /
  restore): per event type E, C_k, vocabulary and numeric synopses;
- :class:`IdfTable` and :func:`cosine`: frozen weights and the reference cosine;
- :class:`ContextChunk`: a chunk of past contexts as a sparse TF matrix;
- :class:`QueryScorer`: a new context scored against chunks, vectorised;
- :class:`TopK`: the best k across chunks, with inserted / displaced reports;
- :func:`search` / :func:`brute_force`: one-call versions;
- :class:`IncidentRule`, :func:`group`, :class:`IncidentTracker`, :class:`LiveIncidents`,
  :class:`BackwardIncidents`: consecutive detections of one key as one incident.

How a Similarity Recall operator uses it (one ``ContextStatistics`` per event type;
per new event one ``QueryScorer`` and one ``TopK``; chunks newest first):

>>> stats = ContextStatistics(SimilarityConfig(numeric={"load": NumericSpec()}), "overload")
>>> past = [[{"user": "u1"}, {"proc": "p1"}, {"load": 0.9}],
...         [{"user": "u2"}, {"proc": "p2"}, {"load": 0.2}],
...         [{"user": "u2"}, {"proc": "p1"}, {"load": 0.8}]]
>>> stats.learn_many(past)
>>> chunk = ContextChunk.from_contexts(["e1", "e2", "e3"], [1.0, 2.0, 3.0], past, stats)
>>> new = [{"user": "u2"}, {"proc": "p1"}, {"load": 0.85}]
>>> stats.learn_one(new)                      # M 3.5: count the new event first
>>> scorer = QueryScorer(stats.table(), new)  # one frozen IDF table for the whole task
>>> top = TopK(2)
>>> inserted, displaced = top.offer(scorer.score(chunk))   # per chunk, as it arrives
>>> [n.eid for n in inserted], displaced
(['e3', 'e1'], ())
>>> saved = stats.snapshot()                  # JSON-able; persist, then after a restart:
>>> ContextStatistics.restore(saved).events
4
"""

from similarity.chunk import ContextChunk, NumericEntries
from similarity.config import NumericSpec, SimilarityConfig
from similarity.errors import (
    CorruptIndex,
    InvalidSimilarityConfig,
    NonNumericValue,
    NotLearned,
    SimilarityError,
    SnapshotError,
)
from similarity.idf import IdfTable, cosine
from similarity.incidents import (
    CLOSE_AFTER_STEPS,
    Assignment,
    BackwardIncidents,
    IncidentRule,
    IncidentTracker,
    LiveAssignment,
    LiveIncidents,
    group,
)
from similarity.scorer import ChunkScores, QueryScorer, SearchStatus
from similarity.search import SearchResult, brute_force, search
from similarity.stats import SNAPSHOT_VERSION, ContextStatistics
from similarity.terms import Context, ContextBag, bag_of, term
from similarity.topk import Neighbour, TopK, top_k
from similarity.vocabulary import Vocabulary

__all__ = [
    "CLOSE_AFTER_STEPS",
    "SNAPSHOT_VERSION",
    "Assignment",
    "BackwardIncidents",
    "ChunkScores",
    "Context",
    "ContextBag",
    "ContextChunk",
    "ContextStatistics",
    "CorruptIndex",
    "IdfTable",
    "IncidentRule",
    "IncidentTracker",
    "InvalidSimilarityConfig",
    "LiveAssignment",
    "LiveIncidents",
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
    "group",
    "search",
    "term",
    "top_k",
]
