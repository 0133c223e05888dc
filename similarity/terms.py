"""Contexts as bags of terms (M 3.3, 3.5 and footnote 2).

A *context* is a bag of tuples (mappings attribute -> value) from one or more context
streams: all tuples sharing the event's id. Each attribute value becomes the term
``"attribute=value"`` (M footnote 2: a user and a process with the same name stay
distinct terms). TF is the number of times a term occurs in the bag.

Rules, so the operator can feed raw rows:

- **Nulls are ignored**: ``None``, float NaN (also numpy's) and pandas' ``NA``/``NaT`` add
  no term and no numeric value. A context whose values are all null is empty.
- **Unknown attributes are just terms**: tuples from different streams may carry
  different attributes (M 3.3); nothing is declared except numeric attributes.
- Attributes in ``config.ignore`` (default ``eid`` and ``ts``) are not terms.
- Declared **numeric** attributes do not make categorical terms; their values are
  collected per attribute (with their multiplicity, the TF) for the kernel IDF. A value
  that is not a finite real number raises :class:`~similarity.errors.NonNumericValue`
  naming the attribute and value. ``bool`` is not accepted as numeric.
- The term text is ``f"{attribute}={value}"`` with ``str(value)``: values compare as
  printed, so ``1`` and ``1.0`` are different terms while ``"1"`` and ``1`` are the same.

>>> bag = bag_of([{"eid": 7, "user": "u1", "proc": "p1"}, {"eid": 7, "proc": "p1", "x": None}])
>>> sorted(bag.terms.items())
[('proc=p1', 2), ('user=u1', 1)]
>>> from similarity.config import SimilarityConfig, NumericSpec
>>> bag_of([{"load": 0.5}, {"load": 0.5}], SimilarityConfig(numeric={"load": NumericSpec()})).numeric
{'load': {0.5: 2}}
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from similarity.config import SimilarityConfig
from similarity.errors import NonNumericValue

Context = Iterable[Mapping[str, object]]
"""A bag of context tuples (one event's context, possibly empty)."""

_DEFAULT = SimilarityConfig()


def term(attribute: str, value: object) -> str:
    """The term of one attribute value (M footnote 2).

    >>> term("user", "u1")
    'user=u1'
    """
    return f"{attribute}={value}"


def is_null(value: object) -> bool:
    """``None``, NaN, or a pandas missing-value marker (checked by type name: no pandas import)."""
    if value is None:
        return True
    if type(value) is str:  # the common case first: isinstance against ABCs is slow
        return False
    if isinstance(value, float):  # also numpy.float64
        return math.isnan(value)
    if isinstance(value, numbers.Real):
        try:
            return math.isnan(float(value))
        except (TypeError, ValueError, OverflowError):
            return False
    return type(value).__name__ in ("NAType", "NaTType")


def numeric_value(attribute: str, value: object) -> float:
    """``value`` as a finite float, or :class:`NonNumericValue` naming ``attribute``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NonNumericValue(attribute, value)
    x = float(value)
    if not math.isfinite(x):
        raise NonNumericValue(attribute, value)
    return x


@dataclass(frozen=True)
class ContextBag:
    """One context as terms: ``terms`` maps term -> TF; ``numeric`` maps a numeric
    attribute -> {value: TF}. Empty when nothing but nulls (or nothing) was given."""

    terms: Mapping[str, int] = field(default_factory=dict)
    numeric: Mapping[str, Mapping[float, int]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not self.terms and not any(self.numeric.values())


def bag_of(context: Context, config: SimilarityConfig = _DEFAULT) -> ContextBag:
    """Turn a bag of tuples into a :class:`ContextBag` (TF counts; rules in the module doc)."""
    terms: Counter[str] = Counter()
    numeric: dict[str, Counter[float]] = {}
    declared = config.numeric
    ignore = config.ignore
    for row in context:
        for attribute, value in row.items():
            if attribute in ignore or is_null(value):
                continue
            if attribute in declared:
                numeric.setdefault(attribute, Counter())[numeric_value(attribute, value)] += 1
            else:
                terms[term(attribute, value)] += 1
    return ContextBag(terms=dict(terms), numeric={a: dict(c) for a, c in numeric.items()})
