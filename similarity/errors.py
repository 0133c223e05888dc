"""Errors raised by :mod:`similarity`.

Each also inherits the matching built-in, so a caller may catch ``ValueError`` (bad
input it should dead-letter) without importing this module. Messages name the
offending attribute, value, term or version.
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class SimilarityError(MoiraeError):
    """Root of the similarity package's errors."""


class NonNumericValue(SimilarityError, ValueError):
    """A value of a declared numeric attribute that is not a finite real number.

    The caller dead-letters the context; ``attribute`` and ``value`` say which."""

    def __init__(self, attribute: str, value: object) -> None:
        self.attribute = attribute
        self.value = value
        super().__init__(
            f"numeric attribute {attribute!r} got a non-numeric value {value!r} "
            f"({type(value).__name__}); expected a finite real number or null"
        )


class NotLearned(SimilarityError, KeyError):
    """``unlearn`` of a context whose term (or numeric value) the statistics never counted."""


class SnapshotError(SimilarityError, ValueError):
    """A snapshot of another kind or version than this code reads."""


class InvalidSimilarityConfig(SimilarityError, ValueError):
    """A similarity setting out of range; the message names the key and value."""


class CorruptIndex(SimilarityError):
    """Bytes that are not a valid chunk index (truncated, altered, other version)."""
