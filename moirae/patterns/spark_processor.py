"""Compiled patterns run live in Spark, per key, under the watermark (T 4).

:class:`PatternProcessor` is a Spark 4 stateful processor
(``groupBy(keys).transformWithStateInPandas``, event-time mode) running one pattern
(:class:`moirae.patterns.spark_core.PatternCore`) or several over the same keys
(:class:`moirae.patterns.spark_set.PatternSet`). For each key it keeps one versioned value
in the state store (:class:`moirae.patterns.spark_buffer.KeyBuffer`):

- the rows that arrived but that the watermark has not passed yet (out-of-order rows wait
  there, so the matcher sees each key's rows in event-time order);
- each pattern's matcher state (:class:`moirae.patterns.KeyState`);
- the provenance of the rows fed that a future match may still bind (the source tuples
  each row came from), bounded, like the matcher's state, by WITHIN.

The value is compact (:mod:`moirae.patterns.spark_buffer`: numpy arrays, pickled once
per step; the registered timer is remembered, so a step that keeps it touches no timer,
and a step that leaves the value as it was writes nothing). Matches leave as one small
frame per key and step, built straight from their columns (:mod:`moirae.patterns.spark_frame`).
On new rows and on an event-time timer, the rows the watermark has passed are handed,
as arrays, to :meth:`moirae.patterns.Matcher.advance_arrays` with the watermark, which
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

from collections.abc import Iterator

import pandas as pd

from moirae.patterns.spark_buffer import KeyBuffer
from moirae.patterns.spark_core import IN_ID, IN_IDS, IN_TS, IN_TUS, PatternCore, event_id
from moirae.patterns.spark_schema import ROW_ID
from moirae.patterns.spark_set import PatternSet

_NS_PER_MS = 1_000_000

__all__ = ["IN_ID", "IN_IDS", "IN_TS", "IN_TUS", "PatternCore", "PatternProcessor", "PatternSet", "batch_matches", "event_id",
           "processor"]


class PatternProcessor:
    """The Spark stateful processor of a pattern or a pattern set (see the module
    docstring). It is built lazily as a subclass of pyspark's ``StatefulProcessor`` by
    :func:`processor`."""


def processor(patterns: PatternCore | PatternSet):
    """A ``StatefulProcessor`` running ``patterns`` per key (imports pyspark only here)."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    ps = PatternSet.of(patterns)
    schema = StructType([StructField("b", BinaryType())])

    class _Processor(StatefulProcessor, PatternProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("pattern", schema)

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802, N803 - pyspark's names
            frames = [f for f in rows if len(f)]
            new = (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)) if frames else None
            yield from self._step(new, timerValues, None, key)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
            fired = expiredTimerInfo.getExpiryTimeInMs() if expiredTimerInfo is not None else None
            yield from self._step(None, timerValues, fired, key)

        def close(self) -> None:
            pass

        def _step(self, new: pd.DataFrame | None, tv, fired: int | None, key: tuple) -> Iterator[pd.DataFrame]:
            wm_ms = tv.getCurrentWatermarkInMs()
            wm_ns = int(wm_ms) * _NS_PER_MS if wm_ms is not None and wm_ms >= 0 else None
            saved = self.state.get()
            raw = saved[0] if saved is not None else None
            buf = KeyBuffer.from_bytes(raw) if raw is not None else KeyBuffer()
            if new is not None:
                ps.take(buf, new, key)
            ready = ps.ready(buf, wm_ns)
            got: list = []
            held = ps.held(buf) if buf.own_t is not None else []  # the rows a match may bind, before the step
            if wm_ns is not None and (ready is not None or buf.matchers):
                got = ps.feed(buf, ready, ps.watermark(wm_ns),
                              lambda i: None if raw is None else KeyBuffer.from_bytes(raw).matcher_of(i))
                buf.fed_ns = wm_ns if buf.fed_ns is None else max(buf.fed_ns, wm_ns)
            out = None
            if got:
                prov = buf.own_rows(held, None if ready is None else (ready[ROW_ID], ready[ps.order_by]))
                out = ps.rows(got, prov if prov is not None else {})
            if buf.fed_ns is not None and ps.within_ns is not None:
                floor = buf.fed_ns - 2 * ps.within_ns  # no run reaches further back
                if buf.prov is not None:
                    buf.prov = buf.prov.since(floor)
                if buf.own_t is not None and buf.own_t < floor:
                    buf.own_t = None
            self._timer(buf, fired)
            if buf.pending is None and not buf.matchers and buf.prov is None and buf.own_t is None:
                if saved is not None:
                    self.state.clear()
            else:
                data = buf.to_bytes()
                if data != raw:  # a step that changed nothing writes nothing
                    self.state.update((data,))
            if out is not None and len(out):
                yield out

        def _timer(self, buf: KeyBuffer, fired: int | None) -> None:
            """Keep the key's one timer at its earliest waiting row or WITHIN deadline (of
            any pattern); Spark deletes a ``fired`` timer itself once its handler returns."""
            due = None
            if buf.pending is not None:
                ts = buf.pending[ps.order_by]
                due = int(ts[0] if buf.ordered else ts.min())
            deadline = ps.next_deadline(buf)
            if deadline is not None:
                due = int(deadline) if due is None else min(due, int(deadline))
            want = None if due is None else -(-due // _NS_PER_MS)  # ceil: fires once the watermark is past it
            have = None if buf.timer is not None and buf.timer == fired else buf.timer
            if want != have:
                if have is not None:
                    self.handle.deleteTimer(have)
                if want is not None:
                    self.handle.registerTimer(want)
            buf.timer = want

    return _Processor()


def batch_matches(patterns: PatternCore | PatternSet):
    """The ``applyInPandas`` function over one key's static rows (materialization).

    A function of the frame alone: Spark passes the grouping key too to a function whose
    signature has two parameters, which a bound method's ``self`` would count as.
    """
    ps = PatternSet.of(patterns)

    def one_key(frame):
        return ps.batch(frame)

    return one_key
