"""Reproducible out-of-order delivery (the DEBS'19 generator, Grulich et al. §2.3).

Event times are never changed. Each tuple gets a separate *ingestion time*: when it
should reach the stream processor. A tuple that is already out of order in the source
keeps its place (its ingestion time is the running maximum event time at its position,
which is exactly when it arrived in the source, §2.3.2 "we will just copy it"). Among the
in-order tuples, a configured fraction is chosen and delayed by a random delay drawn
from a pluggable distribution truncated to ``[min_delay_ms, max_delay_ms]``. The stream
is then stably sorted by ingestion time (§2.3.3).

Two independent random streams, spawned from ``numpy.random.SeedSequence(seed)``, choose
the delayed tuples and draw their delays, so changing the delay distribution never
changes *which* tuples are delayed. Same input and same :class:`ReplayConfig` give the
same output, bit for bit.

>>> import numpy as np
>>> ev = np.arange(10, dtype="int64") * 1_000_000  # one event per ms
>>> cfg = ReplayConfig(ts_col="ts", out_of_order=50, min_delay_ms=3, max_delay_ms=3, seed=1)
>>> d = disorder(ev, cfg)
>>> int((d.delay_ns > 0).sum())
5
>>> bool(np.all(np.diff(d.ingest_ns[d.order]) >= 0))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from moirae.sources.errors import InvalidDelayRange, InvalidFraction, InvalidReplayOption

TimeUnit = Literal["s", "ms", "us", "ns"]
UNITS: tuple[str, ...] = ("s", "ms", "us", "ns")
NS_PER_MS = 1_000_000

# A distribution maps uniform draws u in [0, 1) onto delays in [lo, hi] (ms), by its
# truncated inverse CDF, so every distribution consumes exactly one draw per tuple.
Distribution = Callable[[np.ndarray, float, float], np.ndarray]


def _uniform(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return lo + u * (hi - lo)


def _exponential(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Exponential with mean (hi - lo) / 3 above lo, truncated at hi."""
    width = hi - lo
    if width == 0:
        return np.full_like(u, lo)
    scale = width / 3.0
    mass = -math.expm1(-3.0)  # the mass below hi: width / scale is 3 (never computed: a subnormal width underflows scale to 0)
    return lo - scale * np.log1p(-u * mass)


def _normal(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Normal centred between lo and hi with sigma (hi - lo) / 6, truncated to [lo, hi]."""
    from scipy.stats import truncnorm

    if hi == lo:
        return np.full_like(u, lo)
    mid, sigma = (lo + hi) / 2.0, (hi - lo) / 6.0
    return np.clip(truncnorm.ppf(u, -3.0, 3.0, loc=mid, scale=sigma), lo, hi)


DISTRIBUTIONS: dict[str, Distribution] = {
    "uniform": _uniform,
    "exponential": _exponential,
    "normal": _normal,
}


def register_distribution(name: str, fn: Distribution) -> None:
    """Plug in a delay distribution: ``fn(u, lo_ms, hi_ms)`` maps uniforms in [0, 1) to [lo, hi]."""
    DISTRIBUTIONS[name] = fn


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay a file (DEBS'19 Listing 1).

    ``unit`` is the unit of a numeric event-time column (``s``, ``ms``, ``us``, ``ns``);
    ``None`` means the column is already temporal (a timestamp, or ISO strings).
    ``out_of_order`` is a percentage (0-100) of the in-order tuples to delay.
    ``speedup`` is how many event-time seconds to replay per wall-clock second, or
    ``"max"`` for as fast as the consumer allows.
    """

    ts_col: str
    unit: TimeUnit | None = None
    out_of_order: float = 0.0
    min_delay_ms: float = 0.0
    max_delay_ms: float = 2000.0
    distribution: str = "uniform"
    seed: int = 0
    speedup: float | Literal["max"] = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.ts_col, str) or not self.ts_col:
            raise InvalidReplayOption(f"ts_col must be a column name, got {self.ts_col!r}")
        if self.unit is not None and self.unit not in UNITS:
            raise InvalidReplayOption(f"unit must be one of {', '.join(UNITS)} or None, got {self.unit!r}")
        frac = self.out_of_order
        if not isinstance(frac, int | float) or isinstance(frac, bool) or not 0 <= frac <= 100:
            raise InvalidFraction(f"out-of-order fraction must be within 0-100 %, got {frac!r}")
        for key in ("min_delay_ms", "max_delay_ms"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise InvalidDelayRange(f"{key} must be a finite number >= 0, got {value!r}")
        if self.min_delay_ms > self.max_delay_ms:
            raise InvalidDelayRange(
                f"min_delay_ms ({self.min_delay_ms}) is greater than max_delay_ms ({self.max_delay_ms})")
        if self.distribution not in DISTRIBUTIONS:
            raise InvalidReplayOption(
                f"unknown delay distribution {self.distribution!r}; known: {', '.join(sorted(DISTRIBUTIONS))}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise InvalidReplayOption(f"seed must be a non-negative integer, got {self.seed!r}")
        sp = self.speedup
        if sp != "max" and (not isinstance(sp, int | float) or isinstance(sp, bool) or not sp > 0
                            or not math.isfinite(sp)):
            raise InvalidReplayOption(f"speedup must be a positive number or 'max', got {sp!r}")


@dataclass(frozen=True)
class Disorder:
    """The outcome of :func:`disorder`, indexed like the input (source order).

    ``ingest_ns`` is each tuple's ingestion time, ``delay_ns`` = ingestion - event time,
    ``delayed`` marks the tuples this run chose to delay, and ``order`` is the stable
    permutation that sorts the stream by ingestion time (the delivery order).
    """

    ingest_ns: np.ndarray
    delay_ns: np.ndarray
    delayed: np.ndarray
    order: np.ndarray


def running_max(event_ns: np.ndarray) -> np.ndarray:
    """The running maximum of event times (the stream's progress at each position)."""
    return np.maximum.accumulate(event_ns) if len(event_ns) else event_ns.copy()


def disorder(event_ns: np.ndarray, config: ReplayConfig) -> Disorder:
    """Give each tuple an ingestion time per ``config`` (DEBS'19 §2.3). Pure and seeded."""
    event_ns = np.asarray(event_ns, dtype="int64")
    n = len(event_ns)
    progress = running_max(event_ns)
    choose_ss, delay_ss = np.random.SeedSequence(config.seed).spawn(2)
    in_order = np.flatnonzero(event_ns >= progress)
    k = int(round(len(in_order) * config.out_of_order / 100.0))
    chosen = np.sort(np.random.default_rng(choose_ss).permutation(in_order)[:k])
    # One uniform per tuple, so the draw for tuple i does not depend on which were chosen.
    u = np.random.default_rng(delay_ss).random(n)
    fn = DISTRIBUTIONS[config.distribution]
    extra_ms = fn(u[chosen], float(config.min_delay_ms), float(config.max_delay_ms))
    extra_ns = np.zeros(n, dtype="int64")
    extra_ns[chosen] = np.rint(np.asarray(extra_ms, dtype="float64") * NS_PER_MS).astype("int64")
    ingest = progress + extra_ns
    delayed = np.zeros(n, dtype=bool)
    delayed[chosen] = extra_ns[chosen] > 0
    order = np.argsort(ingest, kind="stable")
    return Disorder(ingest_ns=ingest, delay_ns=ingest - event_ns, delayed=delayed, order=order)
