"""A key's matcher state: explicit, versioned, serializable (docs/PATTERNS.md).

It holds the rows a live run or PREV may still read (only the columns the pattern reads,
plus event time, row id and the row's minterm mask), the live runs (start row, automaton
state, the best match so far, deadline) and the counters. Rows leave it once no run
needs them, so its size is bounded by the rows of one WITHIN (T 4: per-key state).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np

from moirae.patterns.errors import PatternStateError

STATE_VERSION = 1


@dataclass
class KeyState:
    """One key's state. ``runs`` rows: [start seq, automaton state, best end seq (-1: none),
    best bindings, deadline ns (None: no WITHIN), live]; ``buf`` columns start at seq ``base``."""

    pattern: str
    key: tuple
    next_seq: int = 0
    match_number: int = 0
    cutoff: int = 0
    base: int = 0
    last_ts: int | None = None
    ts_kind: str = ""
    buf: dict[str, np.ndarray] = field(default_factory=dict)
    runs: list[list] = field(default_factory=list)

    @property
    def rows_held(self) -> int:
        """How many rows the state buffers."""
        return self.next_seq - self.base if self.buf else 0

    @property
    def nbytes(self) -> int:
        """An estimate of the state's size in bytes (buffer plus about 200 bytes a run)."""
        return sum(a.nbytes for a in self.buf.values()) + 200 * len(self.runs) + 200

    def to_bytes(self) -> bytes:
        """The state as bytes, with its version (for a checkpointed state store)."""
        return pickle.dumps((STATE_VERSION, self.__dict__), protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes, pattern: str | None = None) -> KeyState:
        """Read back :meth:`to_bytes`; refuses another version or (given ``pattern``) another pattern."""
        try:
            version, fields = pickle.loads(data)  # noqa: S301 - our own checkpoint
        except Exception as e:  # noqa: BLE001
            raise PatternStateError(f"unreadable pattern state: {e}") from None
        if version != STATE_VERSION:
            raise PatternStateError(f"pattern state version {version}, expected {STATE_VERSION}")
        st = cls(fields["pattern"], fields["key"])
        st.__dict__.update(fields)
        if pattern is not None and st.pattern != pattern:
            raise PatternStateError(f"state of pattern {st.pattern!r} given to pattern {pattern!r}")
        return st


__all__ = ["STATE_VERSION", "KeyState"]
