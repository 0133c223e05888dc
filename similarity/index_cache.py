"""A bounded LRU cache of chunk indexes, by memory (issue 10: "a configurable budget").

Entries are :class:`~similarity.index.ChunkIndex` (or anything with ``nbytes``) under a
hashable key. After each :meth:`IndexCache.put` the bytes held are at most ``budget``:
least recently used entries are evicted first, and an entry larger than the whole budget
is not kept at all (the caller still uses it once). Thread-safe. Pure: no I/O.

>>> class X:
...     def __init__(self, n): self.nbytes = n
>>> c = IndexCache(100)
>>> c.put("a", X(60)); c.put("b", X(30)); c.get("a") is not None
True
>>> c.put("c", X(30)); sorted(c.keys()), c.held   # "b" was least recently used
(['a', 'c'], 90)
>>> c.put("huge", X(500)); "huge" in c.keys()
False
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class IndexCache:
    def __init__(self, budget: int) -> None:
        if budget < 0:
            raise ValueError(f"index cache budget must be >= 0 bytes, got {budget!r}")
        self.budget = int(budget)
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

    def put(self, key: Hashable, value: Any) -> None:
        size = int(value.nbytes)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.held -= old[1]
            if size > self.budget:
                return
            while self._items and self.held + size > self.budget:
                _, (_, s) = self._items.popitem(last=False)
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
