"""One key's saved state in the live pattern processor, kept compact (T 4).

What :mod:`moirae.patterns.spark_processor` saves per key, between micro-batches, as one
value of Spark's state store (:class:`KeyBuffer`):

- ``pending``: the rows that arrived but that the watermark has not passed yet, as one
  numpy array per input column (event time as int64 nanoseconds, UTC);
- ``matchers``: each pattern's matcher state (:class:`moirae.patterns.KeyState`, None
  for a pattern idle on the key), in the order of the operator's patterns (one operator
  may run several patterns over the same keys, :mod:`moirae.patterns.spark_set`);
- ``prov``: the provenance of the rows a future match may still bind (:class:`ProvTable`:
  per row, its id, event time, and the ids and times of the source tuples it came from,
  as flat arrays with offsets);
- ``fed_ns``: the watermark up to which rows were fed; ``timer``: the one event-time timer
  registered for the key (ms), so a step that keeps it touches no timer.

Everything is numpy arrays and plain values, pickled once per step: no pandas frame and
no per-row Python object is saved.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from moirae.patterns.errors import PatternStateError
from moirae.patterns.state import STATE_VERSION, KeyState

BUFFER_VERSION = 3
_NAT = np.iinfo(np.int64).min


def _offsets(lengths: np.ndarray) -> np.ndarray:
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def _take(flat: np.ndarray, off: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``keep`` (a boolean mask) of a flat array with offsets."""
    lengths = np.diff(off)
    return flat[np.repeat(keep, lengths)], _offsets(lengths[keep])


def _times_ns(col, own: np.ndarray) -> np.ndarray:
    """The times of a column of lists of times, flat, as int64 ns (a naive time read as
    UTC); a missing time is ``own``'s (the row's event time)."""
    flat = list(chain.from_iterable(col))
    if not flat:
        return np.zeros(0, dtype=np.int64)
    try:  # Timestamps (the common case): their ns, no parsing
        return np.fromiter((x.value for x in flat), np.int64, len(flat))
    except AttributeError:
        pass
    pts = pd.DatetimeIndex(pd.to_datetime(np.asarray(flat, dtype=object), utc=True)).asi8.copy()
    nat = pts == _NAT
    pts[nat] = own[nat]
    return pts


@dataclass
class ProvTable:
    """Row id -> (event time ns, source ids, source times ns), as arrays (see the module
    docstring); a row id given twice reads as its last entry."""

    rid: np.ndarray
    t: np.ndarray
    ids: np.ndarray
    ids_off: np.ndarray
    pts: np.ndarray
    pts_off: np.ndarray

    @classmethod
    def of(cls, rid: np.ndarray, t: np.ndarray, ids_col, ts_col) -> ProvTable:
        """From the input's provenance columns: per row a list of source ids and a list of
        source times (a missing time reads as the row's own event time)."""
        n = len(rid)
        ids_len = np.fromiter((len(x) for x in ids_col), np.int64, n)
        ts_len = np.fromiter((len(x) for x in ts_col), np.int64, n)
        ids = np.fromiter(chain.from_iterable(ids_col), np.int64, int(ids_len.sum()))
        pts = _times_ns(ts_col, np.repeat(np.asarray(t, dtype=np.int64), ts_len))
        return cls(np.asarray(rid), np.asarray(t, dtype=np.int64), ids, _offsets(ids_len), pts, _offsets(ts_len))

    def __len__(self) -> int:
        return len(self.rid)

    def extend(self, other: ProvTable) -> ProvTable:
        if not len(self):
            return other
        return ProvTable(np.concatenate([self.rid, other.rid]), np.concatenate([self.t, other.t]),
                         np.concatenate([self.ids, other.ids]),
                         np.concatenate([self.ids_off, self.ids_off[-1] + other.ids_off[1:]]),
                         np.concatenate([self.pts, other.pts]),
                         np.concatenate([self.pts_off, self.pts_off[-1] + other.pts_off[1:]]))

    def since(self, floor: int) -> ProvTable | None:
        """The rows of event time at least ``floor`` (None when none is left)."""
        keep = self.t >= floor
        if keep.all():
            return self
        if not keep.any():
            return None
        ids, ids_off = _take(self.ids, self.ids_off, keep)
        pts, pts_off = _take(self.pts, self.pts_off, keep)
        return ProvTable(self.rid[keep], self.t[keep], ids, ids_off, pts, pts_off)

    def lookup(self) -> dict:
        """Row id -> (source ids, source times ns), as plain lists."""
        ids, pts = self.ids.tolist(), self.pts.tolist()
        io, po = self.ids_off.tolist(), self.pts_off.tolist()
        return {r: (ids[io[i]:io[i + 1]], pts[po[i]:po[i + 1]]) for i, r in enumerate(self.rid.tolist())}


@dataclass
class KeyBuffer:
    """One key's saved state (see the module docstring)."""

    key: tuple | None = None
    pending: dict[str, np.ndarray] | None = None
    matchers: tuple[KeyState | None, ...] = ()
    fed_ns: int | None = None
    prov: ProvTable | None = None
    timer: int | None = None

    def to_bytes(self) -> bytes:
        sts = tuple(None if m is None else m.__dict__ for m in self.matchers)
        return pickle.dumps((BUFFER_VERSION, self.key, self.pending, STATE_VERSION, sts, self.fed_ns, self.prov,
                             self.timer),
                            protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBuffer:
        try:
            version, *rest = pickle.loads(data)  # noqa: S301 - our own checkpoint
        except Exception as e:  # noqa: BLE001
            raise PatternStateError(f"unreadable pattern buffer state: {e}") from None
        if version != BUFFER_VERSION:
            raise PatternStateError(f"pattern buffer state version {version}, expected {BUFFER_VERSION}")
        key, pending, st_version, sts, fed_ns, prov, timer = rest
        if st_version != STATE_VERSION:
            raise PatternStateError(f"pattern state version {st_version}, expected {STATE_VERSION}")
        return cls(key, pending, tuple(None if d is None else _state(d) for d in sts), fed_ns, prov, timer)

    def matcher_of(self, i: int) -> KeyState | None:
        """Pattern ``i``'s state (None when the key holds none for it)."""
        return self.matchers[i] if i < len(self.matchers) else None


def _state(fields: dict) -> KeyState:
    st = KeyState(fields["pattern"], fields["key"])
    st.__dict__.update(fields)
    return st


__all__ = ["BUFFER_VERSION", "KeyBuffer", "ProvTable"]
