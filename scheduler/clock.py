"""Injected time.

Logic that depends on time (feedback deadlines, expiry, chunk rotation) takes a
:class:`Clock` and never reads the system clock itself, so tests can move time exactly to
a boundary (STYLE.md, "Time is passed in").

>>> c = ManualClock(10.0)
>>> c.advance(2.5)
>>> c.now()
12.5
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything with ``now() -> float``: seconds on a monotonic scale."""

    def now(self) -> float: ...


class MonotonicClock:
    """The production clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"ManualClock.advance: seconds must be >= 0, got {seconds!r}")
        self._t += seconds

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError(f"ManualClock.set: time may not go back ({t!r} < {self._t!r})")
        self._t = float(t)
