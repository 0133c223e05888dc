"""Ananke's errors: :class:`AnankeError` is the root of every error this package raises.

It derives from the project's root :class:`~moirae.base.errors.MoiraeError`; each class
below also inherits the matching built-in, so callers may catch either.
"""

from __future__ import annotations

from moirae.base.durations import DurationError
from moirae.base.errors import MoiraeError

__all__ = [
    "AnankeError", "BadDuration", "BadPrefix", "GraphError", "ProvenanceError", "UnknownSink", "UnknownSinkName",
]


class AnankeError(MoiraeError):
    """Root of the errors of live forward provenance (:mod:`ananke`)."""


class BadDuration(AnankeError, DurationError):
    """A duration outside the project's grammar (:mod:`moirae.base.durations`)."""


class GraphError(AnankeError, ValueError):
    """An operator graph that cannot be built as asked (bad kind, duplicate sink ...)."""


class UnknownSink(AnankeError, KeyError):
    """A sink name the operator graph does not hold."""


class UnknownSinkName(AnankeError, KeyError):
    """A sink name that the ANK-1 description does not list."""


class ProvenanceError(AnankeError, ValueError):
    """A provenance wrapper used in a way that would lose or corrupt provenance."""


class BadPrefix(AnankeError, ValueError):
    """A graph-store table prefix that is not a plain lower-case SQL identifier."""
