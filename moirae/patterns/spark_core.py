"""One pattern's part of the live operator: feeding a key's rows, shaping matches (T 4).

:class:`PatternCore` is what the stateful processor (:mod:`moirae.patterns.spark_processor`)
and the static path share for one compiled pattern: it takes a key's new rows into the
key's buffer (:class:`moirae.patterns.spark_buffer.KeyBuffer`), hands the rows the
watermark passed to the matcher as arrays, sets a failing row aside as a dead letter
(fed again row by row from the state before it), and makes the matches output rows
(``eid``, event time, keys, measures, provenance arrays). Several cores run in one
operator as a :class:`moirae.patterns.spark_set.PatternSet`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import blake2b as _blake2b

import numpy as np
import pandas as pd

from moirae.patterns.compile import CompiledPattern
from moirae.patterns.errors import PredicateEvaluationError
from moirae.patterns.evaluate import column_array
from moirae.patterns.expr import Col, Prev, Ref, Special, walk
from moirae.patterns.match import Match, plain_key, ts_ns
from moirae.patterns.matcher import Matcher
from moirae.patterns.spark_buffer import KeyBuffer, ProvTable
from moirae.patterns.spark_dead import DeadLetterWriter, current_batch_id
from moirae.patterns.spark_frame import frame as fast_frame
from moirae.patterns.spark_frame import utc_times
from moirae.patterns.spark_schema import PROV_IDS, PROV_TS, ROW_ID
from moirae.patterns.state import KeyState

#: the input's provenance arrays (the source tuples each row came from)
IN_IDS, IN_TS = "moirae_pat_in_ids", "moirae_pat_in_ts"
#: the same of a row that comes from one source tuple: its id, and its time in microseconds
#: (two numbers on the wire, where the arrays cost a Python list each); a row of an
#: uninstrumented input carries neither: it is its own source tuple (its row id and time)
IN_ID, IN_TUS = "moirae_pat_in_id", "moirae_pat_in_tus"
PROV_INPUT = (IN_IDS, IN_TS, IN_ID, IN_TUS)
_NS_PER_MS = 1_000_000
_DT64_NS = np.dtype("datetime64[ns]")


def _utc_ns(s: pd.Series) -> pd.Series:
    """A timestamp column as ``datetime64[ns, UTC]`` (what the matcher's clock reads)."""
    if str(s.dtype) == "datetime64[ns, UTC]":
        return s
    s = pd.to_datetime(s, utc=True)
    return s.dt.as_unit("ns") if hasattr(s.dt, "as_unit") else s


@dataclass
class PatternCore:
    """What the live processor and the batch path share: feeding rows, shaping matches."""

    cp: CompiledPattern
    eid: str
    ts: str
    measures: tuple[str, ...]
    dead: DeadLetterWriter | None = None
    #: dead rows seen by this object when no writer is set (tests)
    dead_seen: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.matcher = Matcher(self.cp)
        self.within_ns = self.cp.within_ns
        #: MATCH_NUMBER() is measured: a key's state (its counter) is kept while idle
        self.numbered = any(isinstance(n, Special) and n.kind.upper() == "MATCH_NUMBER"
                            for _, e in self.cp.statement.measures for n in walk(e))
        #: the event time's kind as the matcher reads it (UTC timestamps, see :meth:`normalize`)
        self.kind = ts_ns(self._times(np.zeros(1, dtype=np.int64)))[1]
        t = self.cp.order_by
        read = {n.name for e in self.cp.statement.defines.values() for n in walk(e) if isinstance(n, (Col, Prev, Ref))}
        #: the columns the matcher is given: the event time only when a DEFINE reads it (a
        #: MEASURE reads it off the rows' times, :meth:`moirae.patterns.Matcher.advance_arrays`)
        self.fed = tuple(c for c in self.cp.columns_used if c != t or t in read)
        #: per tuple of the columns :meth:`take` keeps: those it reads off a new frame
        self._wanted: dict[tuple[str, ...] | None, frozenset] = {}
        #: the output columns of strings and lists (no type to infer, :func:`fast_frame`)
        self.kept = frozenset({self.eid, PROV_IDS, PROV_TS})

    def normalize(self, frame: pd.DataFrame) -> pd.DataFrame:
        t = self.cp.order_by
        if str(frame[t].dtype) == "datetime64[ns, UTC]":
            return frame
        return frame.assign(**{t: _utc_ns(frame[t])})

    def feed(self, st: KeyState | None, ready: pd.DataFrame | None, wm) -> tuple[list[Match], KeyState | None]:
        """Advance ``st`` over ``ready``; a failing row goes to the dead letters."""
        snap = None if st is None else st.to_bytes()
        try:
            return self.matcher.advance(st, ready, watermark=wm)
        except PredicateEvaluationError:
            if ready is None or ready.empty:
                raise
        cp = self.cp
        st = None if snap is None else KeyState.from_bytes(snap)
        out: list[Match] = []
        dead: list[tuple[dict, str]] = []
        for i in range(len(ready)):
            row = ready.iloc[i:i + 1]
            snap = None if st is None else st.to_bytes()
            try:
                got, st = self.matcher.advance(st, row, watermark=None)
                out += got
            except PredicateEvaluationError as exc:
                st = None if snap is None else KeyState.from_bytes(snap)
                cols = [c for c in row.columns if c not in PROV_INPUT]
                dead.append((row[cols].iloc[0].to_dict(), f"pattern {cp.name!r}: {exc}"))
        got, st = self.matcher.advance(st, None, watermark=wm)
        self._dead(dead)
        return out + got, st

    def _dead(self, dead: list[tuple[dict, str]]) -> None:
        if not dead:
            return
        if self.dead is not None:
            self.dead.write(current_batch_id(), dead)
        else:
            self.dead_seen.extend(dead)

    def rows(self, matches: list[Match], prov: dict | ProvTable) -> pd.DataFrame:
        """The matches as output rows (eid, ts, keys, measures, provenance arrays: the
        source ids, and the source times in microseconds); ``prov``: the key's
        :class:`ProvTable`, or row id -> (source ids, source times ns)
        (:meth:`ProvTable.lookup`), at least of the bound rows."""
        cols = self.row_columns(matches, prov)
        return fast_frame(tuple(cols), list(cols.values()), self.kept)

    def row_columns(self, matches: list[Match], prov: dict | ProvTable) -> dict:
        """:meth:`rows` as a dict of columns (a measure whose values are all Python ints,
        or all floats, as the numpy array the ``DataFrame`` constructor makes of them)."""
        cp = self.cp
        n = len(matches)
        ids_col, ts_col = np.empty(n, dtype=object), np.empty(n, dtype=object)
        if isinstance(prov, ProvTable):
            id_lists, us_lists = prov.columns([[rid for rid, _sym in m.rows] for m in matches])
            for j in range(n):
                ids_col[j], ts_col[j] = id_lists[j], us_lists[j]
        else:
            for j, m in enumerate(matches):
                ids: list[int] = []
                tss: list[int] = []
                for rid, _sym in m.rows:
                    pids, pts = prov.get(rid, ((rid,), ()))
                    ids.extend(pids)
                    tss.extend(pts)
                ids_col[j] = [int(i) for i in ids]
                ts_col[j] = [int(t) // 1000 for t in tss]
        last = np.fromiter((_utc_value(m.last_ts) for m in matches), np.int64, n)
        out: dict = {self.eid: _objects([event_id(cp.name, m) for m in matches]), self.ts: utc_times(last)}
        for i, k in enumerate(cp.partition_by):
            out[k] = _objects([m.key[i] for m in matches])
        for name in self.measures:
            out[name] = _typed([_plain(m.measures.get(name)) for m in matches])
        out[PROV_IDS], out[PROV_TS] = ids_col, ts_col
        return out

    # -- the live path's arrays ------------------------------------------------------------

    def take(self, buf: KeyBuffer, frame: pd.DataFrame, key: tuple | None = None,
             columns: tuple[str, ...] | None = None) -> None:
        """Add a key's new rows to ``buf``: their provenance (none while every row is its
        own source tuple, :attr:`KeyBuffer.own_t`), and the rows to ``pending``
        (event time as int64 ns UTC, the row id, and ``columns``, by default those the
        pattern reads; the key's columns are ``buf.key``), kept in ``(event time, row id)``
        order; a row not later than what was already fed is late beyond the watermark and
        is dropped (the archive keeps it)."""
        t = self.cp.order_by
        wanted = self._wanted.get(columns)
        if wanted is None:
            wanted = self._wanted[columns] = frozenset(
                {t, ROW_ID, *PROV_INPUT, *(self.cp.columns_used if columns is None else columns)})
        cols = _arrays(frame, t, wanted)
        if buf.key is None:
            buf.key = self.key_of(frame, key)
        if buf.fed_ns is not None and len(cols[t]) and cols[t].min() <= buf.fed_ns:  # some rows are late
            keep = cols[t] > buf.fed_ns
            if not np.count_nonzero(keep):
                return
            cols = {c: a[keep] for c, a in cols.items()}
        prov = prov_table(cols, t)
        own = buf.prov is None and prov.ids is None and prov.pts is None and prov.ids_off is None \
            and prov.pts_off is None  # rows that are their own source tuple, and no table kept yet: none kept
        if not own:
            buf.prov = prov if buf.prov is None else buf.prov.extend(prov)
        p = buf.pending
        buf.pending = _in_order(cols if p is None else {c: np.concatenate([p[c], a]) for c, a in cols.items()}, t)
        buf.ordered = True
        if own:  # the latest of them (pending holds every row taken since the last feed, in order)
            last = int(buf.pending[t][-1])
            buf.own_t = last if buf.own_t is None else max(buf.own_t, last)

    def key_of(self, frame: pd.DataFrame, key: tuple | None) -> tuple:
        """The key as the matcher names it: Spark's grouping key when its values are plain
        (strings, numbers, booleans: the same values as the frame's), else the frame's."""
        n = len(self.cp.partition_by)
        if key is not None and len(key) >= n and all(type(v) in (str, int, float, bool) for v in key[:n]):
            return tuple(key[:n])
        return plain_key(frame[c].iat[0] for c in self.cp.partition_by)

    def ready(self, buf: KeyBuffer, wm_ns: int | None) -> dict[str, np.ndarray] | None:
        """Take out of ``buf.pending`` the rows the watermark has passed."""
        p = buf.pending
        if p is None or wm_ns is None:
            return None
        if buf.ordered:  # the rows the watermark passed are a prefix
            ts = p[self.cp.order_by]
            n = int(ts.searchsorted(wm_ns, side="right"))
            if n == len(ts):
                buf.pending = None
                return p
            if not n:
                return None
            buf.pending = {c: a[n:] for c, a in p.items()}
            return {c: a[:n] for c, a in p.items()}
        past = p[self.cp.order_by] <= wm_ns
        n = np.count_nonzero(past)
        if n == len(past):
            buf.pending = None
            return p
        if not n:
            return None
        if np.count_nonzero(past[:n]) == n:  # in time order (as :meth:`take` keeps it): a prefix
            buf.pending = {c: a[n:] for c, a in p.items()}
            return {c: a[:n] for c, a in p.items()}
        buf.pending = {c: a[~past] for c, a in p.items()}
        return {c: a[past] for c, a in p.items()}

    def feed_arrays(self, key: tuple, st: KeyState | None, ready: dict[str, np.ndarray] | None, wm,
                    before: Callable[[], KeyState | None], cols: dict[str, np.ndarray] | None = None,
                    memo: dict | None = None) -> tuple[list[Match], KeyState | None]:
        """:meth:`feed` over rows as :meth:`ready` gives them; ``before`` reads the key's
        state as it was before this step (to feed again when a row fails). ``cols`` and
        ``memo``: the rows' columns as the matcher reads them (:meth:`columns`) and the
        sub-expressions' values, when other patterns share them."""
        if ready is None:
            return self.matcher.advance(st, None, watermark=wm)
        t = self.cp.order_by
        if cols is None:
            cols = self.columns(ready, self.fed)
        cols = {c: cols[c] for c in self.fed}
        try:
            return self.matcher.advance_arrays(st, key, ready[t], self.kind, ready[ROW_ID], cols, watermark=wm,
                                               memo=memo)
        except PredicateEvaluationError:
            n = len(ready[t])
            frame = pd.DataFrame({**{c: _objects([v] * n) for c, v in zip(self.cp.partition_by, key, strict=False)
                                     if c not in ready},
                                  **{c: (self._times(a) if c == t else a) for c, a in ready.items()}})
            return self.feed(before(), frame, wm)

    def columns(self, ready: dict[str, np.ndarray], names) -> dict[str, np.ndarray]:
        """The columns ``names`` of ``ready`` rows as the matcher reads them
        (:func:`moirae.patterns.evaluate.column_array`)."""
        t = self.cp.order_by
        return {c: _column(ready[c]) if c != t else column_array(self._times(ready[t])) for c in names}

    def _times(self, ns: np.ndarray) -> pd.Series:
        return pd.Series(pd.to_datetime(ns, utc=True), name=self.cp.order_by)



def _in_order(cols: dict[str, np.ndarray], t: str) -> dict[str, np.ndarray]:
    """Rows given as arrays in ``(t, row id)`` order (a stable sort; as they are when they
    are in order already)."""
    ts = cols[t]
    if len(ts) < 2 or not np.count_nonzero(ts[1:] <= ts[:-1]):
        return cols
    order = np.lexsort((cols[ROW_ID], ts))
    return {c: a[order] for c, a in cols.items()}


def _column(a: np.ndarray) -> np.ndarray:
    """:func:`moirae.patterns.evaluate.column_array` of a numpy column."""
    if a.dtype.kind in "bfMO":
        return a
    if a.dtype.kind in "iu":
        return a.astype(np.float64)
    return column_array(pd.Series(a))


def _arrays(frame: pd.DataFrame, t: str, wanted) -> dict[str, np.ndarray]:
    """The frame's columns in ``wanted`` as numpy arrays (each as ``Series.to_numpy``
    gives it, but the time column ``t``: int64 ns UTC, as :func:`_ns`), read off the
    frame's blocks where pandas allows (no Series, no column not wanted)."""
    mgr = getattr(frame, "_mgr", None)
    names = frame.columns
    if not hasattr(mgr, "blknos") or not names.is_unique:
        return {c: (_ns(frame[c]) if c == t else frame[c].to_numpy()) for c in names if c in wanted}
    blocks, blknos, blklocs = mgr.blocks, mgr.blknos.tolist(), mgr.blklocs.tolist()
    out = {}
    for i, c in enumerate(names.tolist()):
        if c not in wanted:
            continue
        vals = blocks[blknos[i]].values
        if type(vals) is np.ndarray and vals.ndim == 2 and vals.dtype.kind != "M":
            a = vals[blklocs[i]]  # a row of a numpy block: the column, no copy
        elif c == t and vals.ndim == 2 and isinstance(getattr(vals, "_ndarray", None), np.ndarray):
            a = vals._ndarray[blklocs[i]]  # a block of times (with a time zone or not): held as UTC
        else:
            a = mgr.iget_values(i)
        if c == t:
            out[c] = _ns_of(a) if a.dtype.kind == "M" else _ns(frame[c])
        else:
            out[c] = a if isinstance(a, np.ndarray) else frame[c].to_numpy()
    return out


def _ns_of(a) -> np.ndarray:
    """A datetime array (numpy, or pandas' with or without a time zone) as int64 ns UTC."""
    if isinstance(a, np.ndarray):
        return a.astype(_DT64_NS, copy=False).view(np.int64)
    return (a if a.unit == "ns" else a.as_unit("ns")).asi8


def prov_table(cols: dict[str, np.ndarray], t: str) -> ProvTable:
    """The provenance of rows given as arrays (``t``: the event time as int64 ns), from
    whichever provenance columns they carry (:data:`PROV_INPUT`, taken out of ``cols``)."""
    ids_col, ts_col = cols.pop(IN_IDS, None), cols.pop(IN_TS, None)
    one_id, one_t = cols.pop(IN_ID, None), cols.pop(IN_TUS, None)
    if ids_col is not None and ts_col is not None:
        return ProvTable.of(cols[ROW_ID], cols[t], ids_col, ts_col)
    return ProvTable.of_single(cols[ROW_ID], cols[t], one_id, one_t)


def _ns(s: pd.Series) -> np.ndarray:
    """A time column as int64 ns UTC (a naive time read as UTC, as :func:`_utc_ns`)."""
    if s.dtype.kind == "M" or str(s.dtype).startswith("datetime64"):
        return s.to_numpy(dtype="datetime64[ns]").view(np.int64)
    return pd.DatetimeIndex(_utc_ns(s)).asi8


def _objects(values: list) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def _utc_value(v) -> int:
    """The ns since the epoch of time ``v`` read as UTC when naive (a Timestamp's value is
    that already, with a time zone or without)."""
    return v.value if type(v) is pd.Timestamp else pd.Timestamp(v).value


def _typed(values: list):
    """``values`` as the ``DataFrame`` constructor holds them when they are all Python
    ints (int64) or all floats (float64); any other list as it is (the constructor then
    infers its type)."""
    t = type(values[0]) if values else None
    if (t is int or t is float) and all(type(v) is t for v in values):
        try:
            return np.array(values, dtype=np.int64 if t is int else np.float64)
        except OverflowError:  # an int beyond int64: the constructor's own inference
            pass
    return values


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def event_id(pattern: str, m: Match) -> str:
    """A match's event id: the pattern, its key and its first and last rows' ids. The same
    match has the same id live, after a restart and when materialized.

    >>> from moirae.patterns.match import Match
    >>> m = Match("p", ("v1",), 1, 0, 1, 11, 12, ((11, "A"), (12, "B")))
    >>> event_id("p", m) == event_id("p", Match("p", ("v1",), 7, 0, 1, 11, 12, ()))
    True
    """
    text = repr((pattern, tuple(map(str, m.key)), str(m.first_row_id), str(m.last_row_id)))
    return f"{pattern}-{_blake2b(text.encode(), digest_size=8).hexdigest()}"


def prov_of(frame: pd.DataFrame, ts_col: str) -> dict:
    """Row id -> (source ids, source times ns) of ``frame``'s rows."""
    ts = pd.DatetimeIndex(_utc_ns(frame[ts_col])).asi8
    cols = {c: frame[c].to_numpy() for c in (ROW_ID, *PROV_INPUT) if c in frame.columns}
    cols[ts_col] = ts
    return prov_table(cols, ts_col).lookup()
