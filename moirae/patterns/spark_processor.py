"""A compiled pattern run live in Spark, per key, under the watermark (T 4).

:class:`PatternProcessor` is a Spark 4 stateful processor
(``groupBy(keys).transformWithStateInPandas``, event-time mode). For each key it keeps one
versioned value in the state store (:class:`KeyBuffer`):

- the rows that arrived but that the watermark has not passed yet (out-of-order rows wait
  there, so the matcher sees each key's rows in event-time order);
- the matcher's own state (:class:`moirae.patterns.KeyState`, its bytes);
- the provenance of the rows fed that a future match may still bind (the source tuples
  each row came from), bounded, like the matcher's state, by WITHIN.

On new rows and on an event-time timer, the rows the watermark has passed are handed,
as one pandas frame, to :meth:`moirae.patterns.Matcher.advance` with the watermark, which
returns the matches now final. One timer is kept per key: at the earliest waiting row,
or at the earliest WITHIN deadline of a live run, whichever comes first, so a key that
receives nothing more still has its rows fed and its runs closed as the watermark moves.
A row behind what was already fed (late beyond the watermark) is not fed; the archive
has it (docs/ARCHITECTURE.md, 3.1).

A row on which a DEFINE cannot be evaluated is set aside: the frame is fed again row by
row from the state before it, the failing rows go to the dead letters with the reason
(:mod:`moirae.patterns.spark_dead`) and the rest are matched as if they had not come.

The state store commits with Spark's checkpoint, so a restart resumes exactly where the
last committed micro-batch left the buffers and runs: no match is lost or repeated.

:func:`batch_matches` is the same over a static frame (materialization runs the
event-query over archived chunks, M 4.2): every row of the key at once, then the end of
the stream.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from moirae.patterns.compile import CompiledPattern
from moirae.patterns.errors import PatternStateError, PredicateEvaluationError
from moirae.patterns.expr import Special, walk
from moirae.patterns.match import Match
from moirae.patterns.matcher import Matcher
from moirae.patterns.spark_dead import DeadLetterWriter, current_batch_id
from moirae.patterns.spark_schema import PROV_IDS, PROV_TS, ROW_ID
from moirae.patterns.state import KeyState

BUFFER_VERSION = 1
#: the input's provenance arrays (the source tuples each row came from)
IN_IDS, IN_TS = "moirae_pat_in_ids", "moirae_pat_in_ts"
_NS_PER_MS = 1_000_000


@dataclass
class KeyBuffer:
    """One key's saved state (see the module docstring); ``fed_ns``: the watermark up to
    which rows were fed; ``prov``: row id -> (event time ns, source ids, source times ns)."""

    pending: pd.DataFrame | None = None
    matcher: bytes | None = None
    fed_ns: int | None = None
    prov: dict = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return pickle.dumps((BUFFER_VERSION, self.pending, self.matcher, self.fed_ns, self.prov),
                            protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBuffer:
        version, *fields = pickle.loads(data)  # noqa: S301 - our own checkpoint
        if version != BUFFER_VERSION:
            raise PatternStateError(f"pattern buffer state version {version}, expected {BUFFER_VERSION}")
        return cls(*fields)


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
                cols = [c for c in row.columns if c not in (IN_IDS, IN_TS)]
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

    def rows(self, matches: list[Match], prov: dict) -> pd.DataFrame:
        """The matches as output rows (eid, ts, keys, measures, provenance arrays)."""
        cp = self.cp
        recs = []
        for m in matches:
            ids: list[int] = []
            tss: list[pd.Timestamp] = []
            for rid, _sym in m.rows:
                _t, pids, pts = prov.get(rid, (None, (rid,), ()))
                ids.extend(int(p) for p in pids)
                tss.extend(pd.Timestamp(int(t), tz="UTC") for t in pts)
            rec = {self.eid: event_id(cp.name, m), self.ts: pd.Timestamp(m.last_ts).tz_convert("UTC")
                   if pd.Timestamp(m.last_ts).tzinfo else pd.Timestamp(m.last_ts, tz="UTC")}
            rec.update(zip(cp.partition_by, m.key, strict=True))
            for name in self.measures:
                rec[name] = _plain(m.measures.get(name))
            rec[PROV_IDS], rec[PROV_TS] = ids, tss
            recs.append(rec)
        columns = [self.eid, self.ts, *cp.partition_by, *self.measures, PROV_IDS, PROV_TS]
        return pd.DataFrame.from_records(recs, columns=columns)


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
    import hashlib

    text = repr((pattern, tuple(str(k) for k in m.key), str(m.first_row_id), str(m.last_row_id)))
    return f"{pattern}-{hashlib.blake2b(text.encode(), digest_size=8).hexdigest()}"


def _prov_of(frame: pd.DataFrame, ts_col: str) -> dict:
    """Row id -> (event time ns, source ids, source times ns) of ``frame``'s rows."""
    ts = frame[ts_col].to_numpy(dtype="datetime64[ns]").astype(np.int64) if len(frame) else []
    out = {}
    for rid, t, ids, tss in zip(frame[ROW_ID].tolist(), ts, frame[IN_IDS].tolist(), frame[IN_TS].tolist(),
                                strict=True):
        out[rid] = (int(t), tuple(int(i) for i in ids),
                    tuple(int(pd.Timestamp(x).value) if x is not None else int(t) for x in tss))
    return out


class PatternProcessor:
    """The Spark stateful processor of one pattern (see the module docstring). It is
    built lazily as a subclass of pyspark's ``StatefulProcessor`` by :func:`processor`."""


def processor(core: PatternCore):
    """A ``StatefulProcessor`` running ``core`` per key (imports pyspark only here)."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class _Processor(StatefulProcessor, PatternProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("pattern", StructType([StructField("b", BinaryType())]))

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802, N803 - pyspark's names
            frames = [f for f in rows if len(f)]
            new = pd.concat(frames, ignore_index=True) if frames else None
            yield from self._step(new, timerValues)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
            yield from self._step(None, timerValues)

        def close(self) -> None:
            pass

        def _step(self, new: pd.DataFrame | None, tv) -> Iterator[pd.DataFrame]:
            cp = core.cp
            t = cp.order_by
            wm_ms = tv.getCurrentWatermarkInMs()
            wm_ns = int(wm_ms) * _NS_PER_MS if wm_ms is not None and wm_ms >= 0 else None
            buf = KeyBuffer.from_bytes(self.state.get()[0]) if self.state.exists() else KeyBuffer()
            pending = buf.pending
            if new is not None:
                new = core.normalize(new)
                if buf.fed_ns is not None:  # late beyond what was fed: the archive keeps it
                    new = new[new[t].to_numpy(dtype="datetime64[ns]").astype(np.int64) > buf.fed_ns]
                pending = new if pending is None or pending.empty else pd.concat([pending, new], ignore_index=True)
            ready = None
            if pending is not None and not pending.empty and wm_ns is not None:
                times = pending[t].to_numpy(dtype="datetime64[ns]").astype(np.int64)
                ready, pending = pending[times <= wm_ns], pending[times > wm_ns]
                if ready.empty:
                    ready = None
                elif not ready[t].is_monotonic_increasing or not ready[t].is_unique:  # ties: by row id
                    ready = ready.sort_values([t, ROW_ID], kind="stable")
            st = KeyState.from_bytes(buf.matcher) if buf.matcher is not None else None
            matches: list[Match] = []
            if wm_ns is not None and (ready is not None or st is not None):
                if ready is not None:
                    buf.prov.update(_prov_of(ready, t))
                wm = pd.Timestamp(wm_ns, tz="UTC")
                matches, st = core.feed(st, ready, wm)
                buf.fed_ns = wm_ns if buf.fed_ns is None else max(buf.fed_ns, wm_ns)
            out = core.rows(matches, buf.prov) if matches else None
            if buf.fed_ns is not None and core.within_ns is not None:  # no run reaches further back
                floor = buf.fed_ns - 2 * core.within_ns
                buf.prov = {r: v for r, v in buf.prov.items() if v[0] >= floor}
            buf.pending = pending if pending is not None and not pending.empty else None
            if st is not None and not st.runs and not st.rows_held and not core.numbered:
                st = None  # an idle key keeps nothing (state bounded by WITHIN)
            buf.matcher = st.to_bytes() if st is not None else None
            self._timer(buf, st)
            if buf.pending is None and st is None and not buf.prov:
                self.state.clear()
            else:
                self.state.update((buf.to_bytes(),))
            if out is not None and len(out):
                yield out

        def _timer(self, buf: KeyBuffer, st: KeyState | None) -> None:
            for old in list(self.handle.listTimers()):
                self.handle.deleteTimer(old)
            due = []
            if buf.pending is not None:
                first = int(buf.pending[core.cp.order_by].to_numpy(dtype="datetime64[ns]").astype(np.int64).min())
                due.append(first)
            deadline = core.matcher.next_deadline(st)
            if deadline is not None:
                due.append(int(deadline))
            if due:
                self.handle.registerTimer(-(-min(due) // _NS_PER_MS))  # ceil: fires once the watermark is past it

    return _Processor()


def batch_matches(core: PatternCore):
    """The ``applyInPandas`` function over one key's static rows (materialization)."""

    def fn(frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty:
            return core.rows([], {})
        frame = core.normalize(frame).sort_values([core.cp.order_by, ROW_ID], kind="stable")
        prov = _prov_of(frame, core.cp.order_by)
        got, st = core.feed(None, frame, None)
        end, _ = core.matcher.finish(st)
        return core.rows(got + end, prov)

    return fn
