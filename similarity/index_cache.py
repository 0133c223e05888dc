"""A bounded LRU cache of chunk indexes, by memory (a configurable budget).

Entries are :class:`~similarity.index.ChunkIndex` (or anything with ``nbytes``) under a
hashable key. After each :meth:`IndexCache.put` the bytes held are at most ``budget``:
least recently used entries are evicted first, and an entry larger than the whole budget
is not kept at all (the caller still uses it once). Thread-safe. Pure: no I/O.

``keep`` (optional, key -> sortable) ranks entries before recency: the lowest rank is
evicted first, least recently used among equals. A Similarity Recall ranks chunks by
id, so the oldest history leaves first: every task reads newest first, and under plain
LRU a scan longer than the cache evicts each chunk just before the next task asks for
it (no hit at all); keeping the newest chunks serves every first result from memory.

>>> class X:
...     def __init__(self, n): self.nbytes = n
>>> c = IndexCache(100)
>>> c.put("a", X(60)); c.put("b", X(30)); c.get("a") is not None
True
>>> c.put("c", X(30)); sorted(c.keys()), c.held   # "b" was least recently used
(['a', 'c'], 90)
>>> c.put("huge", X(500)); "huge" in c.keys()
False
>>> n = IndexCache(100, keep=lambda k: k)
>>> for k in (3, 2, 1, 4): n.put(k, X(40))
>>> sorted(n.keys())   # the lowest-ranked (oldest chunks) went first, not the least recent
[3, 4]
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_CACHE_BYTES = 256 * 2**20
"""The default memory bound of a Similarity Recall's cached chunk indexes."""


class IndexCache:
    def __init__(self, budget: int, keep: Callable[[Hashable], Any] | None = None) -> None:
        if budget < 0:
            raise ValueError(f"index cache budget must be >= 0 bytes, got {budget!r}")
        self.budget = int(budget)
        self.keep = keep
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.held = 0
        self.peak = 0
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def peek(self, key: Hashable) -> Any | None:
        """The entry under ``key`` if held, else None; counts nothing and leaves the
        recency order alone (a look to decide, not a use)."""
        with self._lock:
            item = self._items.get(key)
            return None if item is None else item[0]

    def put(self, key: Hashable, value: Any) -> None:
        size = int(value.nbytes)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.held -= old[1]
            if size > self.budget:
                return
            while self._items and self.held + size > self.budget:
                if self.keep is None:
                    _, (_, s) = self._items.popitem(last=False)
                else:  # lowest rank first; OrderedDict order (LRU first) breaks ties, min() keeps the first
                    victim = min(self._items, key=self.keep)
                    if self.keep(key) < self.keep(victim):  # the newcomer ranks lowest: evicted at once
                        self.evictions += 1
                        return
                    s = self._items.pop(victim)[1]
                self.held -= s
                self.evictions += 1
            self._items[key] = (value, size)
            self.held += size
            self.peak = max(self.peak, self.held)

    def discard(self, pred: Callable[[Hashable], bool]) -> int:
        """Drop every entry whose key satisfies ``pred``; returns how many."""
        with self._lock:
            gone = [k for k in self._items if pred(k)]
            for k in gone:
                self.held -= self._items.pop(k)[1]
            return len(gone)

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._items)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"budget": self.budget, "held": self.held, "peak": self.peak, "entries": len(self._items),
                    "hits": self.hits, "misses": self.misses, "evictions": self.evictions}
