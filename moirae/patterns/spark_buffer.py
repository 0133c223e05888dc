"""One key's saved state in the live pattern processor, kept compact (T 4).

What :mod:`moirae.patterns.spark_processor` saves per key, between micro-batches, as one
value of Spark's state store (:class:`KeyBuffer`):

- ``pending``: the rows that arrived but that the watermark has not passed yet, as one
  numpy array per column the patterns read (event time as int64 nanoseconds, UTC, and
  the row id; the key's own columns are ``key``);
- ``matchers``: each pattern's matcher state (:class:`moirae.patterns.KeyState`, None
  for a pattern idle on the key), in the order of the operator's patterns (one operator
  may run several patterns over the same keys, :mod:`moirae.patterns.spark_set`);
- ``prov``: the provenance of the rows a future match may still bind (:class:`ProvTable`:
  per row, its id, event time, and the ids and times of the source tuples it came from,
  as flat arrays with offsets; a row that is its own source tuple costs its id and time
  only, and none at all while no other kind of row came, see ``own_t``);
- ``fed_ns``: the watermark up to which rows were fed; ``timer``: the one event-time timer
  registered for the key (ms), so a step that keeps it touches no timer;
- ``own_t``: while every row taken is its own source tuple (its row id, its event time:
  a source read directly), no table is kept: a match reads its rows' ids and times off the
  rows themselves (every row a match may bind is held by a matcher's state or waits in
  ``pending``, :meth:`KeyBuffer.own_rows`); ``own_t``, the latest event time of those
  rows, keeps the value as long as a table of them would be kept (the watermark fed less
  twice the largest WITHIN), so the key's ``fed_ns`` lives as long as before.

Everything is numpy arrays and plain values, pickled once per step: no pandas frame and
no per-row Python object is saved. A numeric array is saved as its dtype and its raw
bytes (:func:`_pack`), which pickle copies as one block, instead of through numpy's own
pickling, whose fixed cost per array a key's value would pay for each of its arrays.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

import numpy as np
import pandas as pd

from moirae.patterns.errors import PatternStateError
from moirae.patterns.state import STATE_VERSION, KeyState

BUFFER_VERSION = 6
#: versions still read: a version-5 buffer has no ``own_t`` (its :class:`ProvTable` holds
#: every row, those that are their own source too); a version-4 buffer pickles its arrays
#: and its :class:`ProvTable` as numpy and the dataclass do; a version-3 buffer is one whose
#: :class:`ProvTable` uses no shorthand and whose ``pending`` also holds the key's columns
#: (ignored)
_READS = (3, 4, 5, 6)
#: the dtype kinds saved as raw bytes (everything but Python objects and strings)
_RAW = frozenset("biufcmM")
_NAT = np.iinfo(np.int64).min
_FIRST = itemgetter(0)
#: above this many rows :meth:`ProvTable.lookup` finds the wanted ids with numpy, below by a scan
_SCAN = 256


def _int64(a) -> np.ndarray:
    """``np.asarray(a, dtype=np.int64)``, without the call when ``a`` is that already."""
    return a if type(a) is np.ndarray and a.dtype == np.int64 else np.asarray(a, dtype=np.int64)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two 1-d arrays hold the same values (``np.array_equal``, without its checks)."""
    return a.shape == b.shape and not np.count_nonzero(a != b)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def _take(flat: np.ndarray | None, off: np.ndarray | None,
          keep: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The rows ``keep`` (a boolean mask) of a flat array with offsets (None: the
    :class:`ProvTable` shorthands, kept)."""
    if flat is None or off is None:
        return (None if flat is None else flat[keep]), None
    lengths = np.diff(off)
    return flat[np.repeat(keep, lengths)], _offsets(lengths[keep])


def _times_ns(flat: list, own: np.ndarray) -> np.ndarray:
    """Times as int64 ns (a naive time read as UTC); a missing time is ``own``'s (the
    event time of the row it came with)."""
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
    docstring); a row id given twice reads as its last entry. Compact where the input
    allows: ``ids`` None when each row's one source id is its row id, ``pts`` None when
    each row's one source time is its event time, an offsets array None when every row
    has exactly one entry.

    >>> t = ProvTable.of_single(np.array([7, 8]), np.array([10, 20]), np.array([7, 8]), np.array([0, 0]))
    >>> t.ids is None, t.ids_off is None, t.pts.tolist(), t.lookup([8])
    (True, True, [0, 0], {8: ([8], [0])})
    """

    rid: np.ndarray
    t: np.ndarray
    ids: np.ndarray | None
    ids_off: np.ndarray | None
    pts: np.ndarray | None
    pts_off: np.ndarray | None

    @classmethod
    def of(cls, rid: np.ndarray, t: np.ndarray, ids_col, ts_col) -> ProvTable:
        """From the input's provenance columns: per row a list of source ids and a list of
        source times (a missing time reads as the row's own event time)."""
        n = len(rid)
        ids_len = np.fromiter(map(len, ids_col), np.int64, n)
        ts_len = np.fromiter(map(len, ts_col), np.int64, n)
        one_id, one_t = np.count_nonzero(ids_len == 1) == n, np.count_nonzero(ts_len == 1) == n
        if one_id:  # one source tuple a row (the common case): no flattening
            ids = np.fromiter(map(_FIRST, ids_col), np.int64, n)
        else:
            ids = np.fromiter(chain.from_iterable(ids_col), np.int64, int(ids_len.sum()))
        t = np.asarray(t, dtype=np.int64)
        pts = _times_ns(list(map(_FIRST, ts_col)) if one_t else list(chain.from_iterable(ts_col)),
                        t if one_t else np.repeat(t, ts_len))
        return cls._compact(np.asarray(rid), t, ids, None if one_id else _offsets(ids_len), pts,
                            None if one_t else _offsets(ts_len))

    @classmethod
    def of_single(cls, rid: np.ndarray, t: np.ndarray, ids: np.ndarray | None, tus: np.ndarray | None) -> ProvTable:
        """Rows that each come from one source tuple: its id (``ids``) and time in
        microseconds (``tus``; a missing time reads as the row's own event time). None:
        the row itself (its row id, its event time)."""
        t = _int64(t)
        pts = None
        if tus is not None:
            tus = np.asarray(tus)
            if tus.dtype.kind in "iu":
                pts = _int64(tus) * 1000
            else:  # NULLs: float with NaN, or objects with None
                f = np.asarray(tus, dtype=np.float64)
                nan = np.isnan(f)
                pts = np.where(nan, t, np.round(np.where(nan, 0.0, f)).astype(np.int64) * 1000)
        return cls._compact(np.asarray(rid), t, None if ids is None else _int64(ids), None, pts, None)

    @classmethod
    def _compact(cls, rid, t, ids, ids_off, pts, pts_off) -> ProvTable:
        if ids is not None and ids_off is None and rid.dtype.kind in "iu" and _same(ids, rid):
            ids = None
        if pts is not None and pts_off is None and _same(pts, t):
            pts = None
        return cls(rid, t, ids, ids_off, pts, pts_off)

    def __len__(self) -> int:
        return len(self.rid)

    def _ids(self) -> np.ndarray:
        return self.rid.astype(np.int64) if self.ids is None else self.ids

    def _pts(self) -> np.ndarray:
        return self.t if self.pts is None else self.pts

    def extend(self, other: ProvTable) -> ProvTable:
        if not len(self):
            return other
        if not len(other):
            return self
        ids = None if self.ids is None and other.ids is None else np.concatenate([self._ids(), other._ids()])
        pts = None if self.pts is None and other.pts is None else np.concatenate([self._pts(), other._pts()])
        return ProvTable(np.concatenate([self.rid, other.rid]), np.concatenate([self.t, other.t]),
                         ids, _join(self.ids_off, len(self), other.ids_off, len(other)),
                         pts, _join(self.pts_off, len(self), other.pts_off, len(other)))

    def since(self, floor: int) -> ProvTable | None:
        """The rows of event time at least ``floor`` (None when none is left)."""
        if not len(self.t) or self.t.min() >= floor:  # nothing to drop (the common case): one reduction
            return self
        keep = self.t >= floor
        n = np.count_nonzero(keep)
        if n == len(keep):
            return self
        if not n:
            return None
        ids, ids_off = _take(self.ids, self.ids_off, keep)
        pts, pts_off = _take(self.pts, self.pts_off, keep)
        return ProvTable(self.rid[keep], self.t[keep], ids, ids_off, pts, pts_off)

    def lookup(self, rids=None) -> dict:
        """Row id -> (source ids, source times ns), as plain lists: of every row, or of
        the rows whose ids are in ``rids``."""
        rid = self.rid.tolist()
        if rids is None:
            at = range(len(rid))
        elif len(rid) > _SCAN and self.rid.dtype.kind in "iu":
            at = np.flatnonzero(np.isin(self.rid, np.fromiter(rids, np.int64))).tolist()
        else:
            want = rids if isinstance(rids, (set, frozenset, dict)) else set(rids)
            at = [i for i, r in enumerate(rid) if r in want]
        if not at:
            return {}
        io, po = self.ids_off, self.pts_off
        ids, pts = self._ids(), self._pts()
        if io is None:
            ids = ids.tolist()
        if po is None:
            pts = pts.tolist()
        out = {}
        for i in at:
            out[rid[i]] = ([ids[i]] if io is None else ids[io[i]:io[i + 1]].tolist(),
                           [pts[i]] if po is None else pts[po[i]:po[i + 1]].tolist())
        return out

    def columns(self, rows: list[list]) -> tuple[list[list[int]], list[list[int]]]:
        """For each list of row ids in ``rows`` (a match's bound rows, in order): the
        source ids of those rows and their source times in microseconds, end to end, as
        :meth:`lookup` has them; a row id the table lacks is its own source, without a
        time. Read straight off the arrays when every row has one source tuple."""
        if self.ids_off is None and self.pts_off is None:
            rid = self.rid.tolist()
            t_of = dict(zip(rid, self._pts().tolist(), strict=True))  # a row id given twice: its last entry
            id_of = None if self.ids is None else dict(zip(rid, self.ids.tolist(), strict=True))
            try:
                us = [[t_of[r] // 1000 for r in rs] for rs in rows]
                return ([list(rs) for rs in rows] if id_of is None else [[id_of[r] for r in rs] for rs in rows]), us
            except KeyError:  # a row the table lacks: as :meth:`lookup` reads it
                pass
        prov = self.lookup({r for rs in rows for r in rs})
        return ([[int(i) for r in rs for i in prov.get(r, ((r,), ()))[0]] for rs in rows],
                [[int(t) // 1000 for r in rs for t in prov.get(r, ((r,), ()))[1]] for rs in rows])


def _join(a: np.ndarray | None, na: int, b: np.ndarray | None, nb: int) -> np.ndarray | None:
    """The offsets of two tables' flat arrays put end to end (None: one entry a row)."""
    if a is None and b is None:
        return None
    a = np.arange(na + 1, dtype=np.int64) if a is None else a
    b = np.arange(nb + 1, dtype=np.int64) if b is None else b
    return np.concatenate([a, a[-1] + b[1:]])


@dataclass
class KeyBuffer:
    """One key's saved state (see the module docstring)."""

    key: tuple | None = None
    pending: dict[str, np.ndarray] | None = None
    matchers: tuple[KeyState | None, ...] = ()
    fed_ns: int | None = None
    prov: ProvTable | None = None
    timer: int | None = None
    #: whether ``pending`` is in ``(event time, row id)`` order, as a step leaves it (not
    #: saved: a buffer of version 5 or later is; one of an older version may not be)
    ordered: bool = field(default=True, repr=False, compare=False)
    own_t: int | None = None

    def to_bytes(self) -> bytes:
        sts = tuple([None if m is None else {**m.__dict__, "buf": _pack_cols(m.buf)} for m in self.matchers])
        p = self.prov
        prov = None if p is None else (_pack(p.rid), _pack(p.t), *[None if a is None else _pack(a) for a in
                                                                    (p.ids, p.ids_off, p.pts, p.pts_off)])
        return pickle.dumps((BUFFER_VERSION, self.key, _pack_cols(self.pending), STATE_VERSION, sts, self.fed_ns,
                             prov, self.timer, self.own_t),
                            protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBuffer:
        try:
            version, *rest = pickle.loads(data)  # noqa: S301 - our own checkpoint
        except Exception as e:  # noqa: BLE001
            raise PatternStateError(f"unreadable pattern buffer state: {e}") from None
        if version not in _READS:
            raise PatternStateError(f"pattern buffer state version {version}, expected {BUFFER_VERSION}")
        key, pending, st_version, sts, fed_ns, prov, timer, *own_t = rest
        if st_version != STATE_VERSION:
            raise PatternStateError(f"pattern state version {st_version}, expected {STATE_VERSION}")
        if version >= 5:
            pending = _unpack_cols(pending)
            for d in sts:
                if d is not None:
                    d["buf"] = _unpack_cols(d["buf"])
            if prov is not None:
                prov = ProvTable(*[_unpack(v) for v in prov])
        return cls(key, pending, tuple([None if d is None else _state(d) for d in sts]), fed_ns, prov, timer,
                   version >= 5, own_t[0] if own_t else None)

    def own_rows(self, held: list, ready: tuple | None) -> ProvTable | None:
        """The rows that are their own source tuple, as a table (their ids, their event
        times), from ``held`` (the ``(row ids, times)`` the matchers' states held before this
        step) and ``ready`` (the rows fed in it), with the kept table after them (its
        entries read last): what a match of this step reads its provenance from."""
        parts = [*held, *([ready] if ready is not None else [])]
        if self.own_t is None or not parts:
            return self.prov
        rid = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        t = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
        own = ProvTable(rid, _int64(t), None, None, None, None)
        return own if self.prov is None else own.extend(self.prov)

    def matcher_of(self, i: int) -> KeyState | None:
        """Pattern ``i``'s state (None when the key holds none for it)."""
        return self.matchers[i] if i < len(self.matchers) else None


def _pack(a):
    """A numeric array as ``(dtype, raw bytes)`` (:func:`_unpack` reads it back); any
    other value (None, an array of objects or strings) as itself.

    >>> a = np.array([3, -1], dtype=np.int64)
    >>> b = _unpack(pickle.loads(pickle.dumps(_pack(a))))
    >>> b.tolist(), b.dtype == a.dtype, b.flags.writeable
    ([3, -1], True, True)
    >>> _unpack(_pack(np.array(["a"], dtype=object))).tolist()
    ['a']
    """
    if type(a) is np.ndarray and a.ndim == 1:
        dt = a.dtype
        name = _NAMES.get(dt)
        if name is None and dt.kind in _RAW:
            name = _NAMES[dt] = dt.str
        if name is not None:
            return name, bytearray(a.tobytes())
    return a


def _unpack(v):
    if type(v) is tuple:
        return np.frombuffer(v[1], dtype=_dtype(v[0]))  # writable: pickle reads a bytearray back as one
    return v


def _pack_cols(cols: dict | None) -> dict | None:
    if cols is None:
        return None
    out = {}
    names, raw, ndarray = _NAMES, _RAW, np.ndarray
    for c, a in cols.items():  # :func:`_pack`, inlined: a key's value has several of these a step
        if type(a) is ndarray and a.ndim == 1:
            dt = a.dtype
            name = names.get(dt)
            if name is None and dt.kind in raw:
                name = names[dt] = dt.str
            if name is not None:
                out[c] = name, bytearray(a.tobytes())
                continue
        out[c] = a
    return out


def _unpack_cols(cols: dict | None) -> dict | None:
    if cols is None:
        return None
    frombuffer = np.frombuffer
    return {c: frombuffer(v[1], dtype=_dtype(v[0])) if type(v) is tuple else v for c, v in cols.items()}


#: the saved name (``dtype.str``) of each dtype saved raw, and the dtype of each name read
#: back: reading a dtype's name, or parsing one, costs more than looking it up
_NAMES: dict[np.dtype, str] = {}
_DTYPES: dict[str, np.dtype] = {}


def _dtype(name: str) -> np.dtype:
    dt = _DTYPES.get(name)
    if dt is None:
        dt = _DTYPES[name] = np.dtype(name)
    return dt


def _state(fields: dict) -> KeyState:
    if fields.keys() == _STATE_FIELDS:  # every field saved (the same version wrote it): no defaults to fill in
        st = object.__new__(KeyState)
        st.__dict__ = fields
        return st
    st = KeyState(fields["pattern"], fields["key"])
    st.__dict__.update(fields)
    return st


_STATE_FIELDS = frozenset(KeyState("", ()).__dict__)


__all__ = ["BUFFER_VERSION", "KeyBuffer", "ProvTable"]
