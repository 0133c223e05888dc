"""What a Similarity Recall query declares about its contexts (M 3.5).

:class:`SimilarityConfig` is plain data: which attributes are numeric (compared with
Agrawal et al.'s kernel IDF instead of as categorical terms), which attributes are not
context at all (the event id and timestamp of each context tuple, M 3.3), and the base
of the logarithm. It round-trips through :meth:`SimilarityConfig.to_dict` so a snapshot
of the statistics carries the config it was built with.

**Choosing the bandwidth h (M 3.5, Agrawal et al.).** By default h follows Silverman's
rule of thumb for a normal reference, ``h = 1.06 * sigma * n ** (-1/5)``, where
``sigma`` is the running standard deviation of every value of the attribute learned so
far (Welford, exact, kept beside the histogram) and ``n`` their number. ``bandwidth``
fixes h instead. With fewer than two values, or all values equal, sigma is 0 and so is
h: the kernel then degenerates to exact equality (1 if equal, else 0).

**The histogram synopsis.** The first ``warmup`` values are kept exactly. Then the bin
width is fixed to ``bin_width`` or, by default, ``sigma / bins_per_sigma``; bins are
sparse (only occupied bins exist) and keep their count and the sum of their values, so
each bin is represented by its mean, not its centre. When more than ``max_bins`` bins are
occupied, neighbouring bins are merged pairwise (the width doubles); merging is exact
for counts and sums.

>>> cfg = SimilarityConfig(numeric={"load": NumericSpec(bandwidth=0.5)})
>>> SimilarityConfig.from_dict(cfg.to_dict()) == cfg
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from similarity.errors import InvalidSimilarityConfig


@dataclass(frozen=True)
class NumericSpec:
    """How one numeric attribute is summarised and compared (M 3.5)."""

    bandwidth: float | None = None
    """Kernel bandwidth h; ``None``: Silverman's rule from the running variance."""
    bin_width: float | None = None
    """Histogram bin width; ``None``: ``sigma / bins_per_sigma`` after the warm-up."""
    bins_per_sigma: int = 64
    warmup: int = 32
    """Values kept exactly before the bin width is chosen."""
    max_bins: int = 4096

    def __post_init__(self) -> None:
        for key in ("bandwidth", "bin_width"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise InvalidSimilarityConfig(f"NumericSpec.{key} must be a positive number, got {v!r}")
        for key in ("bins_per_sigma", "warmup", "max_bins"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidSimilarityConfig(f"NumericSpec.{key} must be an integer >= 1, got {v!r}")
        if self.max_bins < 2:
            raise InvalidSimilarityConfig(f"NumericSpec.max_bins must be >= 2, got {self.max_bins!r}")


@dataclass(frozen=True)
class SimilarityConfig:
    """The context declaration of one event type.

    ``numeric`` maps attribute name -> :class:`NumericSpec`; every other attribute is
    categorical. ``ignore`` lists attributes that are not terms (by default the context
    tuple's ``eid`` and ``ts``, M 3.3). ``log_base`` is the base of IDF's logarithm: the
    cosine does not depend on it (every weight scales by the same factor); M fig. 5
    prints base-10 values.

    ``idf`` chooses the categorical IDF: ``"paper"`` (default) is M 3.5's
    ``log(E / C_k)``; ``"smooth"`` is ``log((1 + E) / (1 + C_k)) + 1`` (scikit-learn's
    ``smooth_idf``), which keeps a term shared by most contexts from weighing nothing:
    flatter weights, between the paper's TF-IDF and Jaccard's equal weights
    (``bench/similarity_quality.py`` reports both).
    """

    numeric: Mapping[str, NumericSpec] = field(default_factory=dict)
    ignore: frozenset[str] = frozenset({"eid", "ts"})
    log_base: float = math.e
    idf: str = "paper"

    def __post_init__(self) -> None:
        object.__setattr__(self, "numeric", dict(self.numeric))
        object.__setattr__(self, "ignore", frozenset(self.ignore))
        for name, spec in self.numeric.items():
            if not isinstance(name, str) or not isinstance(spec, NumericSpec):
                raise InvalidSimilarityConfig(
                    f"SimilarityConfig.numeric must map str -> NumericSpec, got {name!r}: {spec!r}"
                )
        if not (isinstance(self.log_base, int | float) and self.log_base > 1 and math.isfinite(self.log_base)):
            raise InvalidSimilarityConfig(f"SimilarityConfig.log_base must be > 1, got {self.log_base!r}")
        if self.idf not in ("paper", "smooth"):
            raise InvalidSimilarityConfig(f"SimilarityConfig.idf must be 'paper' or 'smooth', got {self.idf!r}")

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.numeric.items())), self.ignore, self.log_base, self.idf))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able)."""
        return {
            "numeric": {name: asdict(spec) for name, spec in sorted(self.numeric.items())},
            "ignore": sorted(self.ignore),
            "log_base": self.log_base,
            **({} if self.idf == "paper" else {"idf": self.idf}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimilarityConfig:
        """Inverse of :meth:`to_dict`; unknown keys are errors that name the key."""
        unknown = set(data) - {"numeric", "ignore", "log_base", "idf"}
        if unknown:
            raise InvalidSimilarityConfig(f"unknown similarity config key(s): {sorted(unknown)}")
        numeric = {}
        for name, spec in dict(data.get("numeric", {})).items():
            try:
                numeric[name] = NumericSpec(**spec)
            except TypeError as exc:
                raise InvalidSimilarityConfig(f"numeric attribute {name!r}: {exc}") from exc
        return cls(
            numeric=numeric,
            ignore=frozenset(data.get("ignore", ("eid", "ts"))),
            log_base=float(data.get("log_base", math.e)),
            idf=str(data.get("idf", "paper")),
        )
