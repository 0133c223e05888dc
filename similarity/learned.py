"""The ids of the events a Similarity Recall has counted in E and C_k (M 3.5), in 8
bytes each.

Statistics are "computed incrementally" (M 3.5), each event once: an event seen again
(replayed after a restart, or re-materialized over the archive) must not be counted
twice, so the operator remembers every event it learned, for as long as it runs, in
memory that must stay small on the driver (a set of strings costs several times more).

Here an id is kept as its 64-bit XXH3 hash: a sorted numpy array, plus a small set of
the latest hashes merged into it every :data:`MERGE_AT` additions (one ``searchsorted``
and one ``insert``, a copy of the array). Membership is
then approximate in one direction only: an event whose hash equals that of an earlier,
different event would be taken as learned and not counted. For ``n`` learned events and
``m`` new ones the chance of any such miss is about ``n * m / 2**64``: 5e-5 after a year
of one event a second, and its cost one event fewer in the IDF statistics. The exact ids
are still saved, in ``moirae_similarity_learned`` (:mod:`moirae.ingest.persist`).

>>> ids = LearnedIds(["e1", "e2"])
>>> ids.add("e3"), ids.add("e2"), "e1" in ids, "e4" in ids, len(ids)
(True, False, True, False, 3)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import xxhash

#: hashes kept in the Python set before they are merged into the sorted array
MERGE_AT = 65_536


def key(eid: str) -> int:
    """The 64-bit hash an event id is kept as."""
    return xxhash.xxh3_64_intdigest(eid.encode("utf-8", "surrogatepass"))


class LearnedIds:
    """A set of event ids, kept as 64-bit hashes (module doc). Not thread-safe: the
    Similarity Recall that owns it guards it with its lock."""

    def __init__(self, eids: Iterable[str] = ()) -> None:
        self._sorted = np.empty(0, dtype=np.uint64)
        self._pending: set[int] = set()
        self.update(eids)

    def __contains__(self, eid: str) -> bool:
        return self._has(key(eid))

    def __len__(self) -> int:
        return len(self._sorted) + len(self._pending)

    def add(self, eid: str) -> bool:
        """Add ``eid``; False if it was in already."""
        k = key(eid)
        if self._has(k):
            return False
        self._pending.add(k)
        if len(self._pending) >= MERGE_AT:
            self._merge()
        return True

    def discard(self, eid: str) -> bool:
        """Remove ``eid`` (an event taken back out of the statistics); False if it was not in."""
        k = key(eid)
        if k in self._pending:
            self._pending.discard(k)
            return True
        i = int(np.searchsorted(self._sorted, np.uint64(k)))
        if i < len(self._sorted) and int(self._sorted[i]) == k:
            self._sorted = np.delete(self._sorted, i)  # a new array: copies share the old one
            return True
        return False

    def update(self, eids: Iterable[str]) -> None:
        """Add every id of ``eids`` (a restore's million at once: one sort)."""
        keys = np.fromiter((key(e) for e in eids), dtype=np.uint64)
        if len(keys):
            self._merge(keys)

    def copy(self) -> LearnedIds:
        out = LearnedIds()
        out._sorted, out._pending = self._sorted, set(self._pending)  # the array is never written in place
        return out

    @property
    def nbytes(self) -> int:
        """Memory held, about: the array and the pending set's hashes."""
        return int(self._sorted.nbytes) + 64 * len(self._pending)

    def _has(self, k: int) -> bool:
        if k in self._pending:
            return True
        i = int(np.searchsorted(self._sorted, np.uint64(k)))
        return i < len(self._sorted) and int(self._sorted[i]) == k

    def _merge(self, more: np.ndarray | None = None) -> None:
        new = np.fromiter(self._pending, dtype=np.uint64, count=len(self._pending))
        if more is not None:
            new = np.concatenate([new, more])
        new = np.unique(new)  # sorted
        at = np.searchsorted(self._sorted, new)
        if len(self._sorted):  # drop those in already (a restore's ids over the learned ones)
            new, at = self._absent(new, at)
        self._sorted = np.insert(self._sorted, at, new)
        self._pending = set()

    def _absent(self, new: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = self._sorted[np.minimum(at, len(self._sorted) - 1)] == new
        return new[~found], at[~found]
