"""Incremental document frequencies of one event type (M 3.5).

M 3.5: "As a new event occurs, we increment the total number of events, E, and, for each
attribute-value k in the event, we update the total number of contexts, C_k, containing
k. We then recompute IDF_k". :class:`ContextStatistics` is that state for one event type
(IDF is kept per event type, M 3.5), with a River-like verb set:

- :meth:`~ContextStatistics.learn_one` / :meth:`~ContextStatistics.learn_many`: count
  contexts (the new event's context should be learned before it is scored, as M 3.5
  does, so E includes it);
- :meth:`~ContextStatistics.unlearn_one`: the exact inverse (retention dropping events);
- :meth:`~ContextStatistics.table`: a frozen :class:`~similarity.idf.IdfTable` to score
  with (cached until the next learn, so events scored between two learns share it);
- :meth:`~ContextStatistics.snapshot` / :meth:`ContextStatistics.restore`: plain,
  JSON-able data with a version number, for the caller to persist in PostgreSQL.

Learning one context at a time or many in one pass gives the same state
(``tests/similarity/test_stats.py``).

>>> s = ContextStatistics(event_type="overload")
>>> s.learn_one([{"user": "u1"}, {"proc": "p1"}, {"proc": "p1"}])
>>> s.learn_one([{"user": "u2"}, {"proc": "p1"}])
>>> s.events, s.doc_freq("proc=p1"), s.doc_freq("user=u1"), s.doc_freq("nope")
(2, 2, 1, 0)
>>> ContextStatistics.restore(s.snapshot()).snapshot() == s.snapshot()
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from similarity.config import SimilarityConfig
from similarity.errors import NotLearned, SimilarityError, SnapshotError
from similarity.idf import IdfTable
from similarity.synopsis import NumericSynopsis
from similarity.terms import Context, ContextBag, bag_of
from similarity.vocabulary import Vocabulary

SNAPSHOT_KIND = "moirae.similarity.stats"
SNAPSHOT_VERSION = 1
_tokens = itertools.count(1)


class ContextStatistics:
    """E, C_k, the vocabulary and the numeric synopses of one event type."""

    def __init__(self, config: SimilarityConfig | None = None, event_type: str = "") -> None:
        self.config = config if config is not None else SimilarityConfig()
        self.event_type = event_type
        self.vocabulary = Vocabulary()
        self.events = 0
        self._df = np.zeros(64, dtype=np.int64)  # C_k by column; may be shorter than the vocabulary
        self.numeric = {a: NumericSynopsis(spec, self.config.log_base) for a, spec in self.config.numeric.items()}
        self._table: IdfTable | None = None

    # -- learning -------------------------------------------------------------------
    def bag(self, context: Context) -> ContextBag:
        return bag_of(context, self.config)

    def learn_one(self, context: Context | ContextBag) -> None:
        """Count one event's context: E += 1, C_k += 1 for each distinct term, and each
        numeric value into its synopsis. Raises ``NonNumericValue`` (nothing counted)."""
        bag = self._checked(context)
        self._table = None
        self.events += 1
        cols = [self.vocabulary.add(t) for t in bag.terms]
        self._grow(len(self.vocabulary))
        if cols:
            self._df[np.asarray(cols, dtype=np.int64)] += 1
        for attr, values in bag.numeric.items():
            syn = self._synopsis(attr)
            for v, tf in values.items():
                syn.learn(v, tf)

    def _checked(self, context: Context | ContextBag) -> ContextBag:
        """The context as a bag, with every numeric attribute declared (checked before
        anything is counted, so a bad context changes nothing)."""
        if not isinstance(context, ContextBag):
            return self.bag(context)
        for attr in context.numeric:
            if attr not in self.numeric:
                raise SimilarityError(
                    f"event type {self.event_type!r}: numeric attribute {attr!r} is not declared in the config"
                )
        return context

    def _synopsis(self, attr: str) -> NumericSynopsis:
        return self.numeric[attr]

    def learn_many(self, contexts: Iterable[Context | ContextBag]) -> None:
        """Count many contexts in one pass (bags are made first, so a bad value counts nothing)."""
        bags = [self._checked(c) for c in contexts]
        if not bags:
            return
        self._table = None
        self.events += len(bags)
        cols = [self.vocabulary.add(t) for b in bags for t in b.terms]
        self._grow(len(self.vocabulary))
        if cols:
            self._df[: len(self.vocabulary)] += np.bincount(
                np.asarray(cols, dtype=np.int64), minlength=len(self.vocabulary)
            )
        for b in bags:
            for attr, values in b.numeric.items():
                syn = self._synopsis(attr)
                for v, tf in values.items():
                    syn.learn(v, tf)

    def unlearn_one(self, context: Context | ContextBag) -> None:
        """Exact inverse of :meth:`learn_one` (the vocabulary keeps its columns).
        ``NotLearned`` if the context was not counted; then nothing changes."""
        bag = self._checked(context)
        if self.events < 1:
            raise NotLearned(f"event type {self.event_type!r}: no context learned, cannot unlearn")
        cols = []
        for t in bag.terms:
            col = self.vocabulary.index(t)
            if col is None or self._df[col] < 1:
                raise NotLearned(f"event type {self.event_type!r}: term {t!r} was never learned")
            cols.append(col)
        self._table = None
        self.events -= 1
        if cols:
            self._df[np.asarray(cols, dtype=np.int64)] -= 1
        for attr, values in bag.numeric.items():
            for v, tf in values.items():
                self.numeric[attr].unlearn(v, tf)

    def _grow(self, size: int) -> None:
        if size > self._df.shape[0]:
            grown = np.zeros(max(size, 2 * self._df.shape[0]), dtype=np.int64)
            grown[: self._df.shape[0]] = self._df
            self._df = grown

    # -- reading --------------------------------------------------------------------
    def doc_freq(self, term: str) -> int:
        """C_k: the number of learned contexts containing ``term``."""
        col = self.vocabulary.index(term)
        return int(self._df[col]) if col is not None and col < self._df.shape[0] else 0

    def doc_freqs(self) -> np.ndarray:
        """C_k for every vocabulary column (a copy)."""
        n = len(self.vocabulary)
        self._grow(n)
        return self._df[:n].copy()

    def table(self) -> IdfTable:
        """The current IDF, frozen (M 3.5, conventions in :mod:`similarity.idf`).

        The same object is returned until the next learn/unlearn, so per-table caches
        (chunk norms) are shared by all events scored in between."""
        if self._table is None:
            df = self.doc_freqs()
            e = max(self.events, 1)
            if self.config.idf == "smooth":  # log((1 + E) / (1 + C_k)) + 1 (SimilarityConfig.idf)
                idf = (np.log((1 + self.events) / (1.0 + df)) + 1.0) / math.log(self.config.log_base)
            else:
                idf = np.log(e / np.maximum(df, 1)) / math.log(self.config.log_base)
            idf = np.maximum(idf, 0.0)
            idf.setflags(write=False)
            self._table = IdfTable(
                token=next(_tokens),
                events=self.events,
                idf=idf,
                vocabulary=self.vocabulary,
                config=self.config,
                numeric={a: syn.freeze() for a, syn in self.numeric.items()},
            )
        return self._table

    # -- persistence ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Plain, JSON-able state with ``kind`` and ``version`` (checked by :meth:`restore`)."""
        return {
            "kind": SNAPSHOT_KIND,
            "version": SNAPSHOT_VERSION,
            "event_type": self.event_type,
            "config": self.config.to_dict(),
            "events": self.events,
            "terms": self.vocabulary.terms(),
            "doc_freq": [int(x) for x in self.doc_freqs()],
            "numeric": {a: syn.to_dict() for a, syn in sorted(self.numeric.items())},
        }

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], config: SimilarityConfig | None = None) -> ContextStatistics:
        """Rebuild from :meth:`snapshot`; ``SnapshotError`` names a wrong kind or version.

        With ``config``, the statistics continue under that configuration: the counts E
        and C_k do not depend on the IDF flavour (applied when :meth:`table` freezes
        them), so a changed ``idf`` is taken as it is now configured; any other change
        (numeric declarations, ignored attributes, log base) makes the learned synopses
        meaningless and is a ``SnapshotError`` that names both declarations."""
        kind = snapshot.get("kind")
        version = snapshot.get("version")
        if kind != SNAPSHOT_KIND:
            raise SnapshotError(f"not a similarity statistics snapshot: kind={kind!r}")
        if version != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"similarity statistics snapshot version {version!r} is not supported "
                f"(this code reads version {SNAPSHOT_VERSION})"
            )
        saved = SimilarityConfig.from_dict(snapshot["config"])
        if config is not None and replace(saved, idf=config.idf) != config:
            raise SnapshotError(f"similarity statistics were learned under {saved.to_dict()}, "
                                f"not the configured {config.to_dict()}")
        config = config or saved
        stats = cls(config, event_type=str(snapshot.get("event_type", "")))
        stats.events = int(snapshot["events"])
        terms, df = list(snapshot["terms"]), list(snapshot["doc_freq"])
        if len(terms) != len(df):
            raise SnapshotError(f"snapshot has {len(terms)} terms but {len(df)} doc_freq entries")
        for t in terms:
            stats.vocabulary.add(t)
        if len(stats.vocabulary) != len(terms):
            raise SnapshotError("snapshot vocabulary repeats a term")
        stats._grow(len(terms))
        stats._df[: len(terms)] = np.asarray(df, dtype=np.int64)
        for attr, data in dict(snapshot.get("numeric", {})).items():
            if attr not in config.numeric:
                raise SnapshotError(f"snapshot has a synopsis for undeclared numeric attribute {attr!r}")
            stats.numeric[attr] = NumericSynopsis.from_dict(config.numeric[attr], config.log_base, data)
        return stats
