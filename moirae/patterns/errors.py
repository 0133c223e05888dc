"""The pattern language's errors (docs/PATTERNS.md).

Every error names the pattern and, for compile-time errors, the position of the
offending token as ``line:column`` (both from 1), in one line:

>>> str(UndefinedSymbol("pattern 'p' at 1:9: symbol B used but not defined"))
"pattern 'p' at 1:9: symbol B used but not defined"
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class PatternError(MoiraeError, ValueError):
    """Root of the pattern errors: a pattern that cannot be deployed or run."""


class PatternSyntaxError(PatternError):
    """MATCH_RECOGNIZE text that does not parse or cannot be compiled."""


class UndefinedSymbol(PatternError):
    """A PATTERN, MEASURES or DEFINE refers to a symbol no DEFINE gives."""


class UnboundedPattern(PatternError):
    """A pattern that can match arbitrarily many rows (``*``, ``+``, ``{n,}``) has no WITHIN."""


class UnknownPatternColumn(PatternError):
    """A predicate or measure refers to a column the source lacks."""


class PatternStateError(PatternError):
    """Saved matcher state of another version or another pattern."""


class PredicateEvaluationError(PatternError):
    """A DEFINE or MEASURES expression failed to evaluate on a row (names symbol and row)."""


def at(name: str, line: int, col: int, message: str) -> str:
    """The one-line message shape of every compile-time error.

    >>> at("p", 2, 5, "bad")
    "pattern 'p' at 2:5: bad"
    """
    return f"pattern {name!r} at {line}:{col}: {message}"


__all__ = [
    "PatternError", "PatternStateError", "PatternSyntaxError", "PredicateEvaluationError",
    "UnboundedPattern", "UndefinedSymbol", "UnknownPatternColumn", "at",
]
