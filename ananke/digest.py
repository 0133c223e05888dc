"""Window provenance kept as a digest in Spark and resolved from the archive at the sink.

Why: a window's backward provenance as a list (A 2.3, :mod:`ananke.query`) lives in
Spark's state store, and each micro-batch deserializes, extends and writes back the whole
list of every open window it touches, several times the cost of the window itself. A
window that keeps only ``count(*)`` and ``bit_xor(id)`` of its source tuples costs what
plain Spark costs. Yet almost no window reaches a sink (a filter on the aggregate drops
the rest): the list would be paid for every window to be read for a few.

So when a window reads one source stream through maps that keep its grouping keys and
event time unchanged (no filter: every tuple of the source with those keys in the window
then contributes), the window's state holds only the digest ``(n, x)``: the number of
tuples it aggregated and the XOR of their ids. A sink tuple carries the digest with its
keys and its window's bounds, and the sink's *resolver* reads the candidate tuples back
from the archive, which stores every source tuple exactly once with the same id
(:mod:`ananke.ids`), and keeps the set whose size and XOR match (:func:`match`). This is lazy
provenance: computed for the outputs that exist, by re-deriving it from stored inputs,
as Ariadne (Glavic et al.) does by replay; ANK-1 receives the same sets as with the
lists, so R-V, R-E and R-L are unchanged (A 3).

The candidates can differ from the contributors in two ways, both detected by the digest:

- the archive has not yet stored all of them (its query runs apart from the event-query):
  fewer than ``n`` candidates; the resolver waits and reads again;
- Spark dropped a tuple the archive kept: one that arrived after its window had been
  emitted (behind the watermark; the archive keeps late tuples, M 4.1). Such tuples
  arrived last, so :func:`match` removes the smallest set of the newest-arriving
  candidates (highest archive batch) whose ids XOR to the difference.

A digest that cannot be matched is reported, never guessed silently (the caller counts
and logs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

#: The most subsets :func:`match` tries when late tuples must be removed.
MAX_SUBSETS = 20_000
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class DigestSpec:
    """What a sink's digests are about: the source ``stream``, its event-time column
    ``ts`` and the window's grouping ``keys`` (source columns, unchanged)."""

    stream: str
    ts: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Digest:
    """One sink tuple's window: its key values, bounds ``[lo, hi)`` in microseconds since
    the epoch, and the count and XOR of the ids of the source tuples it aggregated."""

    keys: tuple[Any, ...]
    lo_us: int
    hi_us: int
    n: int
    x: int


def xor_ids(ids) -> int:
    """The XOR of signed 64-bit ids, as a signed 64-bit int (what Spark's ``bit_xor`` gives).

    >>> xor_ids([5, 3])
    6
    >>> xor_ids([-1, 1])
    -2
    >>> xor_ids([])
    0
    """
    acc = 0
    for i in ids:
        acc ^= int(i) & _MASK
    return acc - (1 << 64) if acc >= 1 << 63 else acc


@dataclass(frozen=True)
class Match:
    """The outcome of :func:`match`: the contributors (``None`` if not found), and how many
    candidates were removed as tuples Spark had dropped."""

    rows: list | None
    removed: int = 0

    @property
    def short(self) -> bool:
        return self.rows is None and self.removed < 0


def match(candidates: Sequence[tuple[int, Any, int]], n: int, x: int) -> Match:
    """The subset of ``candidates`` (id, event time, arrival order) that a window with
    digest ``(n, x)`` aggregated.

    All of them when their count and XOR agree. Fewer than ``n``: ``Match(None, -k)``,
    ``k`` missing (the archive lags). More: the ``len - n`` tuples Spark dropped arrived
    after the others, so subsets of the newest arrivals are tried, smallest arrival rank
    first, until one XORs to the difference (at most :data:`MAX_SUBSETS`).

    >>> c = [(1, "t1", 0), (2, "t2", 0), (4, "t4", 1)]
    >>> match(c, 3, 7).rows == c
    True
    >>> match(c, 2, 3).rows == c[:2], match(c, 2, 3).removed
    (True, 1)
    >>> match(c, 4, 0).short
    True
    >>> match(c, 2, 99).rows is None
    True
    """
    have = len(candidates)
    if have < n:
        return Match(None, have - n)
    total = xor_ids(c[0] for c in candidates)
    if have == n:
        return Match(list(candidates) if total == x else None)
    drop = have - n
    want = xor_ids([total, x])  # the XOR of the dropped ids
    order = sorted(range(have), key=lambda i: candidates[i][2], reverse=True)  # newest arrivals first
    tried = 0
    for pool in range(drop, have + 1):  # widen the pool of newest arrivals one at a time
        newest = order[pool - 1]
        for rest in combinations(order[:pool - 1], drop - 1):  # subsets that include the newest of the pool
            tried += 1
            if tried > MAX_SUBSETS:
                return Match(None, drop)
            if xor_ids(candidates[i][0] for i in (newest, *rest)) == want:
                gone = {newest, *rest}
                return Match([c for i, c in enumerate(candidates) if i not in gone], drop)
    return Match(None, drop)
