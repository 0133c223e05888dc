"""Resolution notes as Similarity Recall asks for them: once per chunk per task, from
every recall worker at once (M 3.3, 4.5).

Each chunk a Similarity Recall task scores asks for the resolutions of the past
incidents it newly holds. One SQL round trip each would dominate the recall workers'
time, for an answer that is usually "none": most past incidents have no note, and a new
deployment has none at all.

:class:`ResolutionCache` keeps what it looked up, and whether any incident has a note,
for ``ttl`` seconds. A write through the engine's own incident store clears it at once
(:meth:`invalidate`); a note written by another process (a console attached to the same
database) shows within ``ttl``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

DEFAULT_TTL_S = 1.0


class _Generation:
    """What is known since the last clearing."""

    def __init__(self, born: float) -> None:
        self.born = born
        self.any: bool | None = None  # does any incident have a note?
        self.notes: dict[str, str | None] = {}  # id -> note, or None: looked up, has none


class ResolutionCache:
    """``lookup(ids) -> {id: note}`` and ``any_resolved() -> bool``, remembered for ``ttl``.

    >>> calls = []
    >>> def lookup(ids):
    ...     calls.append(list(ids))
    ...     return {"i1": "restarted the daemon"}
    >>> notes = {"any": True}
    >>> cache = ResolutionCache(lookup, lambda: notes["any"], ttl=60)
    >>> cache.get(["i1", "i2"]), cache.get(["i2", "i1"]), calls
    ({'i1': 'restarted the daemon'}, {'i1': 'restarted the daemon'}, [['i1', 'i2']])
    >>> cache.invalidate(); notes["any"] = False
    >>> cache.get(["i1", "i3"]), calls  # nothing has a note: no lookup at all
    ({}, [['i1', 'i2']])
    """

    def __init__(self, lookup: Callable[[list[str]], Mapping[str, str]], any_resolved: Callable[[], bool],
                 ttl: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.lookup, self.any_resolved = lookup, any_resolved
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._gen = _Generation(clock())
        self.queries = 0  # round trips made
        self.answered = 0  # ids answered without one

    def invalidate(self, notes_only: bool = False) -> None:
        """Forget everything (a note changed), or with ``notes_only`` the notes looked up
        but not whether any incident has one (an incident's events changed: no note was
        written, so a "none at all" still holds, until ``ttl`` from when it was learned).

        >>> asked = []
        >>> cache = ResolutionCache(lambda ids: {}, lambda: asked.append(1) or False, ttl=60)
        >>> cache.get(["i1"]), cache.invalidate(notes_only=True), cache.get(["i2"]), len(asked)
        ({}, None, {}, 1)
        """
        with self._lock:
            old = self._gen
            self._gen = _Generation(old.born if notes_only else self.clock())
            if notes_only:
                self._gen.any = old.any

    def _current(self) -> _Generation:
        with self._lock:
            if self.clock() - self._gen.born > self.ttl:
                self._gen = _Generation(self.clock())
            return self._gen

    def get(self, ids: Iterable[str]) -> dict[str, str]:
        """``{id: note}`` for those of ``ids`` that have a note."""
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return {}
        gen = self._current()
        if gen.any is None:
            gen.any = bool(self.any_resolved())
            self.queries += 1
        if not gen.any:
            self.answered += len(wanted)
            return {}
        known = gen.notes
        missing = [i for i in wanted if i not in known]
        self.answered += len(wanted) - len(missing)
        found: Mapping[str, str] = {}
        if missing:
            found = self.lookup(missing) or {}
            self.queries += 1
            for i in missing:  # a generation cleared meanwhile is simply dropped with this
                known[i] = found.get(i)
        out = {}
        for i in wanted:
            note = found.get(i) if i in found else known.get(i)
            if note:
                out[i] = note
        return out
