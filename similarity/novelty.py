"""Novelty: is a new event like nothing seen before? Pure.

An event is **novel** when its best similarity score against history (its most similar
past incident, M 3.4) is below a threshold. A fixed threshold means little across event
types, whose score scales differ (many shared common terms, or few rare ones), so by
default the threshold is **calibrated**: it is the ``quantile`` (default 5 %) of the
best scores that past events of the type got against *their own* history. By
construction about ``quantile`` of ordinary events are then labelled novel, and an
event whose best score is lower than nearly every ordinary event's is the one an
on-call engineer has not met before.

:class:`NoveltyCalibrator` learns those best scores online: each finished search
(:meth:`observe`) is one past event scored against its own history. Until
``min_samples`` are observed there is no threshold (``novel`` is ``None``: unknown),
unless a fixed threshold is configured.

>>> c = NoveltyCalibrator(quantile=0.1, min_samples=10)
>>> c.is_novel(0.01) is None
True
>>> for s in [0.5, 0.6, 0.7, 0.8, 0.9, 0.55, 0.65, 0.75, 0.85, 0.95]:
...     c.observe(s)
>>> round(c.threshold(), 3), c.is_novel(0.2), c.is_novel(0.6)
(0.545, True, False)
>>> NoveltyCalibrator(fixed=0.3).is_novel(0.2)
True
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from similarity.errors import InvalidSimilarityConfig


def calibrate(best_scores: Iterable[float], quantile: float = 0.05) -> float:
    """The novelty threshold: the ``quantile`` of past events' best scores against
    their own history (linear interpolation). Empty input gives 0 (nothing is novel)."""
    s = np.asarray(list(best_scores), dtype=np.float64)
    if s.size == 0:
        return 0.0
    return float(np.quantile(s, quantile))


@dataclass
class NoveltyCalibrator:
    """Online threshold (module doc). ``fixed`` overrides calibration; ``window`` bounds
    memory to the most recent best scores."""

    quantile: float = 0.05
    min_samples: int = 20
    window: int = 2000
    fixed: float | None = None
    _seen: deque = field(default_factory=deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile < 1.0:
            raise InvalidSimilarityConfig(f"novelty quantile must be in [0, 1), got {self.quantile!r}")
        if self.fixed is not None and not (isinstance(self.fixed, int | float) and 0.0 <= self.fixed <= 1.0):
            raise InvalidSimilarityConfig(f"novelty threshold must be a number in [0, 1], got {self.fixed!r}")
        if self.min_samples < 1 or self.window < self.min_samples:
            raise InvalidSimilarityConfig(f"novelty: need 1 <= min_samples <= window, got {self.min_samples}, "
                                          f"{self.window}")
        self._seen = deque(self._seen, maxlen=self.window)

    def observe(self, best: float) -> None:
        """One past event's best score against its own history (0 when nothing matched)."""
        with self._lock:
            self._seen.append(float(best))

    def observe_many(self, best: Iterable[float]) -> None:
        for b in best:
            self.observe(b)

    @property
    def samples(self) -> int:
        return len(self._seen)

    def threshold(self) -> float | None:
        """The current threshold, or ``None`` while uncalibrated."""
        if self.fixed is not None:
            return float(self.fixed)
        with self._lock:
            if len(self._seen) < self.min_samples:
                return None
            return calibrate(self._seen, self.quantile)

    def is_novel(self, best: float | None) -> bool | None:
        """``True`` below the threshold, ``None`` when no threshold is known yet."""
        t = self.threshold()
        if t is None:
            return None
        return (0.0 if best is None else float(best)) < t

    def snapshot(self) -> dict:
        with self._lock:
            return {"seen": list(self._seen)}

    def restore(self, snap: dict) -> None:
        with self._lock:
            self._seen.clear()
            self._seen.extend(float(x) for x in snap.get("seen", ()))
