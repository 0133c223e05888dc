"""Where a Similarity Recall task gets each chunk's matrix (issue 10 §1; M 3.5, 4.5.2).

:class:`ChunkSource` hands the operator a :class:`similarity.index.ChunkIndex` per chunk:

1. from its bounded LRU memory cache (:class:`similarity.index_cache.IndexCache`);
2. else, for a *sealed* chunk (no stream of the operator holds it in the present tier),
   from the persisted index (:class:`archive.simindex.IndexStore`); a missing entry is
   built once from the chunk's archived rows, vectorised, and persisted; a corrupt one
   is rebuilt with a warning;
3. a present chunk (still receiving rows) is read and built each time, vectorised, and
   neither cached nor persisted.

Term ids are those of the operator's vocabulary, persisted append-only next to the
indexes; :meth:`ChunkSource.reconcile` checks the statistics' vocabulary against it
after a restore (one is a prefix of the other, or every index is dropped and rebuilt).
Retention, re-materialization and late rows call :func:`archive.simindex.invalidate`,
which drops the persisted entries and, through a listener, the cached ones.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from archive import simindex
from similarity.index import ChunkIndex
from similarity.index_cache import IndexCache
from similarity.index_codec import CorruptIndex, decode, encode

log = logging.getLogger(__name__)
DEFAULT_CACHE_BYTES = 256 * 2**20


class ChunkSource:
    """Chunk indexes of one Similarity Recall operator (module doc)."""

    def __init__(self, op: Any, cache_bytes: int = DEFAULT_CACHE_BYTES, persist: bool = True) -> None:
        self.op = op
        self.streams: tuple[str, ...] = (op.event_stream, *op.context_streams, *op.surrounding_streams)
        self.cache = IndexCache(cache_bytes)
        self.builds = self.loads = self.corrupt = 0
        self.build_seconds = 0.0
        self.built_contexts = 0
        can = persist and hasattr(op.store, "_conn")
        self.persisted = simindex.IndexStore(op.store, op.name) if can else None
        self._reconciled = False
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()
        simindex.listen(self._on_invalidate)

    def close(self) -> None:
        simindex.unlisten(self._on_invalidate)

    def _on_invalidate(self, stream: str, chunk_ids: Sequence[int]) -> None:
        if stream in self.streams:
            ids = set(chunk_ids)
            self.cache.discard(lambda k: k in ids)

    def reconcile(self) -> None:
        """Make the statistics' vocabulary and the persisted one agree (module doc)."""
        if self.persisted is None:
            return
        with self.op._lock:
            vocab = self.op.stats.vocabulary
            saved = self.persisted.vocabulary()
            mine = vocab.terms()
            common = min(len(saved), len(mine))
            if saved[:common] != mine[:common]:
                log.warning("similarity index of %r: persisted vocabulary disagrees with the restored statistics; "
                            "dropping every persisted chunk index (they are rebuilt on use)", self.op.name)
                self.persisted.clear()
                self.cache.discard(lambda k: True)
            else:
                for t in saved[len(mine):]:
                    vocab.add(t)
            self._reconciled = True

    def invalidate_all(self) -> None:
        self._reconciled = False
        self.cache.discard(lambda k: True)

    def fetch(self, chunk_id: int, conn: Any = None, timeout_ms: int | None = None) -> ChunkIndex:
        """The index of chunk ``chunk_id`` (module doc)."""
        hit = self.cache.get(chunk_id)
        if hit is not None:
            return hit
        if self.persisted is None or not self.persisted.sealed(chunk_id, self.streams):
            return self.build(chunk_id, conn, timeout_ms)
        if not self._reconciled:
            self.reconcile()
        with self._guard:
            lock = self._locks.setdefault(chunk_id, threading.Lock())
        with lock:  # concurrent tasks wait for one build instead of building the chunk each
            hit = self.cache.get(chunk_id)
            if hit is not None:
                return hit
            ix = self._load(chunk_id)
            if ix is None:
                ix = self.build(chunk_id, conn, timeout_ms)
                with self.op._lock:
                    terms = self.op.stats.vocabulary.terms()
                self.persisted.save(chunk_id, self.streams, ix.contexts, encode(ix), terms)
            self.cache.put(chunk_id, ix)
            return ix

    def _load(self, chunk_id: int) -> ChunkIndex | None:
        blob = self.persisted.load(chunk_id)
        if blob is None:
            return None
        try:
            ix = decode(blob)
            with self.op._lock:
                width = len(self.op.stats.vocabulary)
            if ix.chunk.n_cols > width:
                raise CorruptIndex(f"uses {ix.chunk.n_cols} term ids, the vocabulary has {width}")
        except CorruptIndex as exc:
            self.corrupt += 1
            log.warning("similarity index of %r chunk %s is unusable (%s); rebuilding it from the archive",
                        self.op.name, chunk_id, exc)
            return None
        self.loads += 1
        return ix

    def build(self, chunk_id: int, conn: Any = None, timeout_ms: int | None = None) -> ChunkIndex:
        """Read the chunk's rows with the operator's history-query and build its index."""
        import time

        rows = self.op.store.run_history_query(self.op.query, {}, chunk_id, conn=conn, timeout_ms=timeout_ms)
        t0 = time.perf_counter()
        ix = self.op.index_rows(rows)
        self.build_seconds += time.perf_counter() - t0
        self.builds += 1
        self.built_contexts += ix.contexts
        return ix

    def stats(self) -> dict[str, Any]:
        return {"builds": self.builds, "loads": self.loads, "corrupt": self.corrupt,
                "built_contexts": self.built_contexts, "build_seconds": self.build_seconds,
                "cache": self.cache.stats()}
