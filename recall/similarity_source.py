"""Where a Similarity Recall task gets each chunk's matrix (M 3.5, 4.5.2).

:class:`ChunkSource` hands the operator a :class:`similarity.index.ChunkIndex` per chunk:

1. from its bounded memory cache (:class:`similarity.index_cache.IndexCache`), which
   evicts the oldest chunks first (tasks read newest first, see there);
2. else, for a *sealed* chunk (no stream of the operator holds it in the present tier),
   from the persisted index (:class:`archive.simindex.IndexStore`). The index is
   normally already there: :mod:`recall.similarity_prebuild` builds and persists it in
   the background when the chunk is sealed or materialized (:meth:`ChunkSource.prebuild_one`).
   A missing entry (e.g. a chunk sealed before the operator existed, or a build the
   background worker has not reached) is built once from the chunk's archived rows,
   vectorised, and persisted; a corrupt one is rebuilt with a warning. A per-chunk lock
   makes a task that arrives during a build wait for it instead of building again;
3. a present chunk (still receiving rows) is built from its archived rows and kept in
   memory only until its rows change (never persisted): every write to one of the
   operator's streams goes through :func:`archive.simindex.invalidate` (the Archiver's
   appends, late rows, re-materialization, retention), which drops it, so the tasks of
   the events of one micro-batch share one build of the chunk, and the next batch's
   events (whose own rows and contexts changed it) build it again. A kept index is used
   without asking the catalog whether the chunk was sealed meanwhile: sealing changes no
   row, and the sealed chunk's index replaces it once built. They are held within
   a quarter of the memory budget (the sealed ones within the rest). A build that an
   invalidation overtook (its read may predate the write) is used by its own task but
   not kept.

A run of sealed chunks whose indexes are all in memory can be read as one
(:meth:`ChunkSource.run`): their indexes concatenated (:meth:`ChunkIndex.concat`), so a
task scores a day of one-hour chunks of a few events each in one pass. Runs are cut at
every :data:`RUN_BLOCK`-th chunk id, so the tasks of different events, which start at
different chunks, still meet the same runs and share one concatenation (kept for the
:data:`RUNS_KEPT` latest runs, and checked against the cached indexes it was made of).

Term ids are those of the operator's vocabulary, persisted append-only next to the
indexes; :meth:`ChunkSource.reconcile` checks the statistics' vocabulary against it
after a restore (one is a prefix of the other, or every index is dropped and rebuilt).
Retention, re-materialization and late rows call :func:`archive.simindex.invalidate`,
which drops the persisted entries and, through a listener, the cached ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive import simindex
from archive.chunk_copy import TS_US, Read, codes, texts
from similarity.index import ROW_COLUMNS, ChunkIndex, CodedColumn, build_coded
from similarity.index_cache import DEFAULT_CACHE_BYTES, IndexCache
from similarity.index_codec import CorruptIndex, decode, encode

log = logging.getLogger(__name__)
#: the share of the memory budget for present chunks' indexes (the rest is the sealed ones')
PRESENT_SHARE = 4
#: chunks whose build counts :attr:`ChunkSource.built_chunks` keeps (the latest first counted)
BUILT_KEPT = 1024
#: runs of chunks read as one end at every multiple of this chunk id (ChunkSource.run)
RUN_BLOCK = 16
#: concatenated runs kept (the latest used)
RUNS_KEPT = 32


class ChunkSource:
    """Chunk indexes of one Similarity Recall operator (module doc)."""

    def __init__(self, op: Any, cache_bytes: int = DEFAULT_CACHE_BYTES, persist: bool = True) -> None:
        self.op = op
        self.streams: tuple[str, ...] = (op.event_stream, *op.context_streams, *op.surrounding_streams)
        present = cache_bytes // PRESENT_SHARE  # present chunks kept while unchanged (_present_index)
        self.cache = IndexCache(cache_bytes - present, keep=lambda chunk_id: chunk_id)  # oldest history out first
        self._present = IndexCache(present, keep=lambda chunk_id: chunk_id)
        self.builds = self.loads = self.corrupt = self.prebuilt = 0
        self.promoted = 0  # sealed chunks persisted from their kept present index (prebuild_one)
        self.build_seconds = self.read_seconds = self.save_seconds = 0.0
        self.built_contexts = 0
        self.persisted = op.store.index_store(op.name) if persist else None
        self._reconciled = False
        # Both per-chunk maps hold a chunk only while a task works on it, so a year-long run
        # that reads every chunk once keeps none of them (before, one entry per chunk ever
        # read or written stayed for the operator's life).
        self._locks: dict[int, list] = {}  # chunk -> [its lock, tasks holding or awaiting it]
        self._inflight: dict[int, int] = {}  # chunk being built -> invalidations since (one: not kept)
        self.built_chunks: Counter[int] = Counter()  # chunk -> builds of it, the latest BUILT_KEPT chunks (tests)
        self._runs: OrderedDict[tuple[int, ...], tuple[tuple[ChunkIndex, ...], ChunkIndex]] = OrderedDict()
        self.runs = self.run_chunks = 0  # runs read as one, and the chunks they held
        self._guard = threading.Lock()
        simindex.listen(self._on_invalidate)

    @property
    def present_hits(self) -> int:
        """Fetches of a present chunk served by its kept index (no read, no build)."""
        return self._present.hits

    @property
    def budget(self) -> int:
        """Bytes of chunk indexes held in memory at most: sealed and present ones."""
        return self.cache.budget + self._present.budget

    def close(self) -> None:
        simindex.unlisten(self._on_invalidate)

    def _on_invalidate(self, stream: str, chunk_ids: Sequence[int]) -> None:
        if stream in self.streams:
            ids = self._task_chunks(stream, chunk_ids)
            with self._guard:  # with _present_index's check-and-keep: a kept index is never stale
                for c in ids:
                    if c in self._inflight:
                        self._inflight[c] += 1
                self._present.discard(lambda k: k in ids)
                for key in [k for k in self._runs if not ids.isdisjoint(k)]:
                    del self._runs[key]
            self.cache.discard(lambda k: k in ids)

    def _task_chunks(self, stream: str, chunk_ids: Sequence[int]) -> set[int]:
        """``stream``'s chunks ``chunk_ids`` (on its own grid) as the chunks of the
        operator's task grid (the coarsest interval of its streams) that they overlap:
        the ids this source's indexes are kept under."""
        store = self.op.store
        own, grid = store.grid_of(stream), store.grid_for(self.op.query.streams)
        if own.span == grid.span:
            return set(chunk_ids)
        out: set[int] = set()
        for c in chunk_ids:
            lo, hi = own.bounds(c)
            out.update(range(grid.chunk_of(lo), grid.chunk_of(hi - timedelta(microseconds=1)) + 1))
        return out

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
        with self._guard:
            self._present.discard(lambda k: True)
            self._runs.clear()
        self.cache.discard(lambda k: True)

    @contextmanager
    def _chunk_lock(self, chunk_id: int) -> Iterator[None]:
        """Hold chunk ``chunk_id``'s lock: a task that asks while another builds the
        chunk waits for that build. The lock exists while a task holds or awaits it."""
        with self._guard:
            entry = self._locks.get(chunk_id)
            if entry is None:
                entry = self._locks[chunk_id] = [threading.Lock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[chunk_id]

    def _track(self, chunk_id: int) -> None:
        """Count the invalidations of chunk ``chunk_id`` from now on (the caller holds
        the chunk's lock, and ``_guard`` when the count must start with what it read)."""
        self._inflight[chunk_id] = 0

    def _untrack(self, chunk_id: int) -> None:
        with self._guard:
            self._inflight.pop(chunk_id, None)

    def _overtaken(self, chunk_id: int) -> bool:
        """Whether an invalidation of the chunk came since it was tracked: its rows may
        have changed after the build read them."""
        with self._guard:
            return self._inflight.get(chunk_id, 0) > 0

    def fetch(self, chunk_id: int, conn: Any = None, timeout_ms: int | None = None) -> ChunkIndex:
        """The index of chunk ``chunk_id`` (module doc)."""
        hit = self.cache.get(chunk_id)
        if hit is not None:
            return hit
        if self.persisted is None:  # not an Archiver (no invalidations to trust) or told not to keep
            return self.build(chunk_id, conn, timeout_ms)
        if not self._reconciled:
            self.reconcile()
        with self._chunk_lock(chunk_id):  # concurrent tasks wait for one build instead of building the chunk each
            hit = self.cache.get(chunk_id)
            if hit is not None:
                return hit
            with self._guard:  # kept since the chunk's rows last changed: current, sealed since or not
                kept = self._present.get(chunk_id)
                if kept is not None:
                    return kept
                self._track(chunk_id)  # with the check: a write after it counts
            try:
                sealed, blob = self.persisted.lookup(chunk_id, self.streams, conn)
                if not sealed:
                    return self._present_index(chunk_id, conn, timeout_ms)
                with self._guard:  # sealed since: persisted and cached the sealed way from now on
                    self._present.discard(lambda k: k == chunk_id)
                ix = self._decode(chunk_id, blob)
                if ix is None:
                    return self._build_sealed(chunk_id, conn, timeout_ms)
                self.cache.put(chunk_id, ix)
                return ix
            finally:
                self._untrack(chunk_id)

    def run(self, chunk_ids: Sequence[int], max_rows: int) -> tuple[int, ChunkIndex] | None:
        """The first chunks of ``chunk_ids`` (a task's next chunks, newest first) as one
        index, with how many it holds: as long as each is sealed with its index in
        memory, the run stays within one block of :data:`RUN_BLOCK` chunk ids and holds
        at most ``max_rows`` past events (the first chunk always). None when the first
        chunk's index is not in memory (:meth:`fetch` reads it)."""
        first = self.cache.get(chunk_ids[0])
        if first is None:
            return None
        block = chunk_ids[0] // RUN_BLOCK
        parts, rows = [first], first.n
        for c in chunk_ids[1:]:
            if c // RUN_BLOCK != block:
                break
            ix = self.cache.peek(c)
            if ix is None or rows + ix.n > max_rows:
                break
            parts.append(ix)
            rows += ix.n
        if len(parts) == 1:
            return 1, first
        key = tuple(chunk_ids[:len(parts)])
        with self._guard:
            held = self._runs.get(key)
            if held is not None and all(a is b for a, b in zip(held[0], parts, strict=True)):
                self._runs.move_to_end(key)
                merged = held[1]
            else:
                merged = None
        if merged is None:
            merged = ChunkIndex.concat(parts)
            with self._guard:
                self._runs[key] = (tuple(parts), merged)
                while len(self._runs) > RUNS_KEPT:
                    self._runs.popitem(last=False)
        self.runs += 1
        self.run_chunks += len(parts)
        return len(parts), merged

    def _present_index(self, chunk_id: int, conn: Any, timeout_ms: int | None) -> ChunkIndex:
        """A present chunk's index, none being kept: built, and kept unless an invalidation
        came since :meth:`fetch` found none kept (module doc)."""
        ix = self.build(chunk_id, conn, timeout_ms)
        with self._guard:
            if not self._inflight.get(chunk_id, 0):
                self._present.put(chunk_id, ix)  # within its budget, the oldest chunks out first
        return ix

    def prebuild_one(self, chunk_id: int, conn: Any = None, timeout_ms: int | None = None) -> bool:
        """Build and persist the index of chunk ``chunk_id`` if it is sealed and has no
        persisted index yet (a background build after a seal or a materialization, see
        :mod:`recall.similarity_prebuild`); a present chunk is left alone. True when it
        built one. Shares :meth:`fetch`'s per-chunk lock: a task asking meanwhile waits
        for this build and then uses it. A chunk sealed with its present index kept (no
        write since it was built: sealing changes no row) is persisted from that index,
        not read again."""
        if self.persisted is None:
            return False
        if not self._reconciled:
            self.reconcile()
        with self._chunk_lock(chunk_id):
            if self.cache.get(chunk_id) is not None:
                return False
            with self._guard:
                self._track(chunk_id)  # before the state read: a write after it counts
                kept = self._present.peek(chunk_id)  # current now: a write from here on is counted
            try:
                sealed, persisted = self.persisted.state(chunk_id, self.streams, conn)
                if not sealed or persisted:
                    return False
                if kept is not None:
                    self._keep_sealed(chunk_id, kept)
                    self.promoted += 1
                else:
                    self._build_sealed(chunk_id, conn, timeout_ms)
            finally:
                self._untrack(chunk_id)
            self.prebuilt += 1
            return True

    def _build_sealed(self, chunk_id: int, conn: Any, timeout_ms: int | None) -> ChunkIndex:
        """Build a sealed chunk's index, persist it and cache it (the caller holds the
        chunk's lock and tracks it, :meth:`_track`). Rows that change meanwhile (a late
        row, a re-materialization) invalidate the chunk during the build: the stale
        index is then neither cached nor left persisted, and the next use builds again."""
        return self._keep_sealed(chunk_id, self.build(chunk_id, conn, timeout_ms))

    def _keep_sealed(self, chunk_id: int, ix: ChunkIndex) -> ChunkIndex:
        """Persist and cache a sealed chunk's index ``ix`` (as :meth:`_build_sealed`)."""
        with self.op._lock:
            terms = self.op.stats.vocabulary.terms()
        t0 = time.perf_counter()
        self.persisted.save(chunk_id, self.streams, ix.contexts, encode(ix), terms)
        self.save_seconds += time.perf_counter() - t0
        if self._overtaken(chunk_id):  # invalidated while built: its rows changed
            self.persisted.delete(chunk_id)
            return ix
        self.cache.put(chunk_id, ix)
        with self._guard:  # sealed: served from the cache from now on
            self._present.discard(lambda k: k == chunk_id)
        return ix

    def prebuild(self, chunk_ids: Sequence[int], threads: int = 2) -> None:
        """Fetch (build and persist where missing) the indexes of ``chunk_ids`` with
        ``threads`` connections at once, so PostgreSQL formats one chunk while Python
        parses and encodes another (e.g. after a bulk load)."""
        from concurrent.futures import ThreadPoolExecutor

        ids = list(chunk_ids)
        local = threading.local()

        def one(c: int) -> None:
            if getattr(local, "conn", None) is None:
                local.conn = self.op.store.connect()
                conns.append(local.conn)
            self.fetch(c, local.conn)

        conns: list[Any] = []
        try:
            with ThreadPoolExecutor(max(1, threads)) as pool:
                list(pool.map(one, ids))
        finally:
            for c in conns:
                c.close()

    def _decode(self, chunk_id: int, blob: bytes | None) -> ChunkIndex | None:
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
        """Read the chunk's events, contexts and surrounding tuples in their wide,
        archived form (one ``COPY`` per stream, all in one transaction,
        :mod:`archive.chunk_copy`) and build its index
        (:func:`similarity.index.build_coded`): no Python step per tuple."""
        t0 = time.perf_counter()
        op, grid = self.op, self.op.query.streams
        eid = f'e."{op.eid_attr}"::text'
        ctx = [(s, op._columns(s)) for s in op.context_streams]
        sur = [(s, op._columns(s)) for s in op.surrounding_streams]
        reads = [Read(op.event_stream, [("eid", eid), ("key", op.key_expr())]),
                 *(Read(s, [("eid", eid), *((c, f'e."{c}"::text') for c in cols)], with_ts=False, coded=True)
                   for s, cols in ctx),
                 *(Read(s, [("eid", eid), *((c, f'e."{c}"::text') for c in cols)]) for s, cols in sur)]
        tables = op.store.copy_reads(reads, chunk_id, grid, conn, timeout_ms)
        ev = tables[0]
        eids = texts(ev, "eid")
        ts_ns = ev.column(TS_US).to_numpy() * 1000
        keys = texts(ev, "key")
        index = pd.Index(eids)
        if index.has_duplicates or index.hasnans:  # an event archived twice (or without id): its first row
            first = ~index.duplicated() & (eids != None)  # noqa: E711 (elementwise)
            eids, ts_ns, keys = eids[first], ts_ns[first], keys[first]
            index = pd.Index(eids)
        columns: list[CodedColumn] = []
        for (_stream, cols), t in zip(ctx, tables[1:1 + len(ctx)], strict=True):
            e_codes, e_uni = codes(t, "eid", as_array=True)
            at = index.get_indexer(pd.Index(e_uni, dtype=object)) if len(e_uni) else np.zeros(0, dtype=np.int64)
            rows = np.where(e_codes >= 0, at[e_codes] if len(at) else -1, -1)
            for c in cols:
                v_codes, v_uni = codes(t, c)
                columns.append(CodedColumn(c, rows, v_codes, v_uni))
        surrounding = [_long(s, cols, t) for (s, cols), t in zip(sur, tables[1 + len(ctx):], strict=True)]
        t1 = time.perf_counter()
        with op._lock:  # new terms grow the shared vocabulary
            ix = build_coded(index, ts_ns, keys, columns, op.stats.vocabulary, op.config,
                             pd.concat(surrounding, ignore_index=True) if surrounding else None)
        t2 = time.perf_counter()
        self.read_seconds += t1 - t0
        self.build_seconds += t2 - t1
        self.builds += 1
        self.built_chunks[chunk_id] += 1
        if len(self.built_chunks) > BUILT_KEPT:  # the chunk first counted longest ago goes
            del self.built_chunks[next(iter(self.built_chunks))]
        self.built_contexts += ix.contexts
        return ix

    def stats(self) -> dict[str, Any]:
        return {"builds": self.builds, "prebuilt": self.prebuilt, "loads": self.loads, "corrupt": self.corrupt,
                "present_hits": self.present_hits, "present_cache": self._present.stats(),
                "runs": self.runs, "run_chunks": self.run_chunks, "promoted": self.promoted,
                "built_contexts": self.built_contexts, "build_seconds": self.build_seconds,
                "read_seconds": self.read_seconds, "save_seconds": self.save_seconds,
                "cache": self.cache.stats()}


def _long(stream: str, cols: Sequence[str], t: Any) -> pd.DataFrame:
    """One surrounding stream's tuples of the chunk in long form (``ROW_COLUMNS``)."""
    n, k = t.num_rows, len(cols)
    eid = t.column("eid").to_numpy(zero_copy_only=False).astype(object)
    ts = pd.to_datetime(np.tile(t.column(TS_US).to_numpy(zero_copy_only=False).astype(np.int64) * 1000, k), utc=True)
    values = [t.column(c).to_numpy(zero_copy_only=False).astype(object) for c in cols]
    return pd.DataFrame({"eid": np.tile(eid, k), "ts": ts, "attr": np.repeat(np.asarray(list(cols), dtype=object), n),
                         "value": np.concatenate(values) if values else np.zeros(0, dtype=object),
                         "part": np.full(n * k, f"surrounding:{stream}", dtype=object)}, columns=list(ROW_COLUMNS))
