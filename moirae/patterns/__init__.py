"""Pattern event-queries: MATCH_RECOGNIZE compiled to symbolic automata (T 3-4).

``compile_pattern`` parses and checks a MATCH_RECOGNIZE statement (docs/PATTERNS.md is the
language reference); :class:`Matcher` runs it per key over batches of rows with explicit,
serializable :class:`KeyState`; :func:`reference_matches` is the brute-force oracle the
tests compare it with.
"""

from moirae.patterns.compile import CompiledPattern, compile_pattern
from moirae.patterns.errors import (
    PatternError,
    PatternStateError,
    PatternSyntaxError,
    PredicateEvaluationError,
    UnboundedPattern,
    UndefinedSymbol,
    UnknownPatternColumn,
)
from moirae.patterns.match import Match
from moirae.patterns.matcher import Matcher
from moirae.patterns.reference import reference_matches
from moirae.patterns.state import KeyState

__all__ = [
    "CompiledPattern", "KeyState", "Match", "Matcher", "PatternError", "PatternStateError",
    "PatternSyntaxError", "PredicateEvaluationError", "UnboundedPattern", "UndefinedSymbol",
    "UnknownPatternColumn", "compile_pattern", "reference_matches",
]
