"""The histogram synopsis behind Agrawal et al.'s kernel IDF for numeric attributes (M 3.5).

For a numeric attribute, the generalised IDF of a value ``k`` is (M 3.5, Agrawal et al.)::

    IDF(k) = log( n / sum_i exp(-1/2 ((k_i - k) / h)^2) )

over the ``n`` values ``k_i`` of the attribute learned so far (every occurrence in every
context counts once, as every tuple does in Agrawal et al.). Scanning history for each
``k`` is what M 3.5 avoids: :class:`NumericSynopsis` keeps a fixed-width histogram,
updated one value at a time, and evaluates the sum over bins, each bin standing for its
``count`` values at their ``mean``::

    IDF(k) ~= log( max(n, 1) / max(1, sum_b count_b * exp(-1/2 ((mean_b - k) / h)^2)) )

The ``max(.., 1)`` clamps make an empty synopsis give IDF 0 and a value far from all
history give the largest IDF, ``log n`` (as if the value itself had been counted), never
infinity or a negative weight.

**Accuracy.** Because a bin is represented by the mean of its values, the first-order
error of the kernel sum cancels within each bin; what remains is bounded by about
``(w / h)^2 / 2`` relative to each bin's contribution (``w`` the bin width), i.e. about
3 % of the soft count (0.03 on the natural-log IDF) when ``w <= h / 4``. The default
``w = sigma / 64`` keeps ``w <= h / 4`` up to about a million values (h shrinks as
``n ** -0.2``); ``tests/similarity/test_numeric.py`` checks the tolerance on random data.

:class:`NumericSynopsis` is the mutable, learning side; :meth:`NumericSynopsis.freeze`
returns a :class:`NumericTable`, the read-only view scoring uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from similarity.config import NumericSpec
from similarity.errors import NotLearned

_BLOCK = 1 << 20  # kernel matrix cells evaluated at once (values x bins), bounds memory


def kernel(d: np.ndarray | float, h: float) -> np.ndarray:
    """Gaussian similarity ``exp(-1/2 (d/h)^2)`` of value differences ``d`` (M 3.5).

    ``h == 0`` means exact matching: 1 where ``d == 0``, else 0.

    >>> float(kernel(0.0, 1.0)), round(float(kernel(1.0, 1.0)), 4), float(kernel(0.1, 0.0))
    (1.0, 0.6065, 0.0)
    """
    d = np.asarray(d, dtype=np.float64)
    if h == 0:
        return (d == 0).astype(np.float64)
    z = d / h
    return np.exp(-0.5 * z * z)


@dataclass(frozen=True, eq=False)
class NumericTable:
    """A frozen synopsis: ``means``/``counts`` per bin, ``n`` values, bandwidth ``h``."""

    means: np.ndarray
    counts: np.ndarray
    n: int
    h: float
    log_base: float

    def soft_count(self, values: np.ndarray) -> np.ndarray:
        """``sum_b count_b * K(mean_b - v)`` for each value (vectorised, in blocks)."""
        values = np.asarray(values, dtype=np.float64)
        out = np.zeros(values.shape[0])
        if self.means.size == 0 or values.size == 0:
            return out
        step = max(1, _BLOCK // self.means.size)
        for start in range(0, values.shape[0], step):
            v = values[start : start + step]
            k = kernel(v[:, None] - self.means[None, :], self.h)
            out[start : start + step] = k @ self.counts
        return out

    def idf(self, values: np.ndarray) -> np.ndarray:
        """Generalised IDF of each value (module doc), computed once per distinct value."""
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return np.zeros(0)
        uniq, inverse = np.unique(values, return_inverse=True)
        soft = np.maximum(self.soft_count(uniq), 1.0)
        idf = np.log(max(self.n, 1) / soft) / math.log(self.log_base)
        return np.maximum(idf, 0.0)[inverse]

    def kernel(self, d: np.ndarray | float) -> np.ndarray:
        return kernel(d, self.h)


class NumericSynopsis:
    """Incremental histogram plus running mean/variance of one numeric attribute.

    ``learn(value, count)`` / ``unlearn(value, count)`` are exact for ``n``, the
    variance (weighted Welford) and every bin's count and sum.
    """

    def __init__(self, spec: NumericSpec, log_base: float = math.e) -> None:
        self.spec = spec
        self.log_base = log_base
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.width: float | None = spec.bin_width
        self.raw: dict[float, int] = {}  # exact values until the width is fixed
        self.bins: dict[int, list[float]] = {}  # bin key -> [count, sum]

    # -- learning ---------------------------------------------------------------
    def learn(self, value: float, count: int = 1) -> None:
        n1 = self.n + count
        delta = value - self.mean
        self.mean += delta * count / n1
        # >= 0 in exact arithmetic; rounding (values far from 0, close together) can take
        # it a hair below, and std() would then be the square root of a negative number
        self.m2 = max(0.0, self.m2 + delta * (value - self.mean) * count)
        self.n = n1
        if self.width is None:
            self.raw[value] = self.raw.get(value, 0) + count
            if self.n >= self.spec.warmup and self.std() > 0:
                self._fix_width(self.std() / self.spec.bins_per_sigma)
        else:
            self._add_bin(value, count, count * value)
            if len(self.bins) > self.spec.max_bins:
                self._coarsen()

    def unlearn(self, value: float, count: int = 1) -> None:
        if self.width is None:
            have = self.raw.get(value, 0)
            if have < count:
                raise NotLearned(f"numeric value {value!r} was learned {have} time(s), cannot unlearn {count}")
            if have == count:
                del self.raw[value]
            else:
                self.raw[value] = have - count
        else:
            key = math.floor(value / self.width)
            cell = self.bins.get(key)
            if cell is None or cell[0] < count:
                raise NotLearned(f"numeric value {value!r} is not in the histogram {count} time(s)")
            cell[0] -= count
            cell[1] -= count * value
            if cell[0] == 0:
                del self.bins[key]
        n1 = self.n - count
        if n1 == 0:
            self.n, self.mean, self.m2 = 0, 0.0, 0.0
            return
        mean0 = (self.n * self.mean - count * value) / n1
        self.m2 = max(0.0, self.m2 - count * (value - mean0) * (value - self.mean))
        self.mean, self.n = mean0, n1

    def _add_bin(self, value: float, count: int, total: float) -> None:
        assert self.width is not None
        key = math.floor(value / self.width)
        cell = self.bins.get(key)
        if cell is None:
            self.bins[key] = [count, total]
        else:
            cell[0] += count
            cell[1] += total

    def _fix_width(self, width: float) -> None:
        self.width = width
        for value, count in self.raw.items():
            self._add_bin(value, count, count * value)
        self.raw = {}
        while len(self.bins) > self.spec.max_bins:
            self._coarsen()

    def _coarsen(self) -> None:
        """Merge bins pairwise: width doubles; floor(v / 2w) == floor(floor(v / w) / 2)."""
        assert self.width is not None
        self.width *= 2
        merged: dict[int, list[float]] = {}
        for key, (count, total) in self.bins.items():
            cell = merged.setdefault(key // 2, [0, 0.0])
            cell[0] += count
            cell[1] += total
        self.bins = merged

    # -- reading ----------------------------------------------------------------
    def std(self) -> float:
        """Sample standard deviation of the values learned (0 with fewer than two)."""
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0

    def bandwidth(self) -> float:
        """The configured h, else Silverman's rule ``1.06 * sigma * n ** (-1/5)``."""
        if self.spec.bandwidth is not None:
            return float(self.spec.bandwidth)
        if self.n < 2:
            return 0.0
        return 1.06 * self.std() * self.n ** (-0.2)

    def freeze(self) -> NumericTable:
        if self.width is None:
            means = np.fromiter(self.raw.keys(), dtype=np.float64, count=len(self.raw))
            counts = np.fromiter(self.raw.values(), dtype=np.float64, count=len(self.raw))
        else:
            cells = np.array(list(self.bins.values()), dtype=np.float64).reshape(-1, 2)
            counts = cells[:, 0]
            means = cells[:, 1] / np.where(counts > 0, counts, 1.0)
        means.setflags(write=False)
        counts.setflags(write=False)
        return NumericTable(means=means, counts=counts, n=self.n, h=self.bandwidth(), log_base=self.log_base)

    # -- persistence --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": self.mean,
            "m2": self.m2,
            "width": self.width,
            "raw": [[v, c] for v, c in self.raw.items()],
            "bins": [[k, c, s] for k, (c, s) in self.bins.items()],
        }

    @classmethod
    def from_dict(cls, spec: NumericSpec, log_base: float, data: dict[str, Any]) -> NumericSynopsis:
        syn = cls(spec, log_base)
        syn.n = int(data["n"])
        syn.mean = float(data["mean"])
        syn.m2 = float(data["m2"])
        syn.width = None if data["width"] is None else float(data["width"])
        syn.raw = {float(v): int(c) for v, c in data["raw"]}
        syn.bins = {int(k): [int(c), float(s)] for k, c, s in data["bins"]}
        return syn
