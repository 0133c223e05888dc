"""Several patterns in one live operator: one pass over each key's rows (T 3-4, T 5.2.3).

Patterns over the same source, with the same PARTITION BY and ORDER BY, run as one
:class:`PatternSet` in one stateful operator
(:func:`moirae.patterns.spark_operator.pattern_set_stream`): one shuffle, one state store
value per key, one event-time timer per key, however many patterns there are. The key's
value (:class:`moirae.patterns.spark_buffer.KeyBuffer`) holds the rows waiting for the
watermark and their provenance once, and one matcher state per pattern.

Each key's ready rows are put in ``(event time, row id)`` order and made the matcher's
column arrays once; every pattern's row-local predicates read those same arrays, and a
sub-expression that reads only the current row is evaluated once per batch for all the
patterns that contain it (:class:`moirae.patterns.evaluate.Env`'s memo). Each pattern
then advances its own state (:meth:`moirae.patterns.spark_core.PatternCore.feed_arrays`),
so it finds exactly the matches it finds alone: the same rows, the same order, the same
watermark. A row whose DEFINE fails in one pattern is that pattern's dead letter; the
other patterns still see it.

What the set guarantees as a whole follows from each pattern's: a key's provenance is
kept for the largest WITHIN, the timer is set at the earliest waiting row or deadline of
any pattern, and the operator's lag and hold are the largest WITHIN
(:mod:`moirae.patterns.spark_operator`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from moirae.patterns.errors import PatternError, PatternSyntaxError
from moirae.patterns.match import Match
from moirae.patterns.spark_buffer import KeyBuffer, ProvTable
from moirae.patterns.spark_core import PatternCore
from moirae.patterns.spark_frame import concat as concat_frames
from moirae.patterns.spark_schema import PROV_IDS, PROV_TS, ROW_ID
from moirae.patterns.state import KeyState


class PatternSet:
    """Patterns run together over the same keys (see the module docstring). ``tag``: the
    output column naming each match's pattern (None: a single pattern, untagged, whose
    output is exactly :class:`PatternCore`'s)."""

    def __init__(self, cores: Sequence[PatternCore], tag: str | None = None):
        self.cores = tuple(cores)
        if not self.cores:
            raise PatternError("a pattern operator needs at least one pattern")
        if tag is None and len(self.cores) > 1:
            raise PatternError("several patterns in one operator need a column naming each match's pattern")
        dup = [n for n, k in Counter(c.cp.name for c in self.cores).items() if k > 1]
        if dup:
            raise PatternError(f"pattern {dup[0]!r} given twice to one operator")
        head = self.head = self.cores[0]
        for c in self.cores[1:]:
            for what, mine, theirs in (("PARTITION BY", c.cp.partition_by, head.cp.partition_by),
                                       ("ORDER BY", (c.cp.order_by,), (head.cp.order_by,))):
                if mine != theirs:
                    raise PatternSyntaxError(
                        f"pattern {c.cp.name!r}: {what} {', '.join(mine) or '(none)'} differs from pattern "
                        f"{head.cp.name!r}'s {', '.join(theirs) or '(none)'}: patterns share an operator only "
                        "over the same keys and event time")
        self.tag = tag
        self.order_by, self.partition_by = head.cp.order_by, head.cp.partition_by
        self.columns = tuple(dict.fromkeys(c for core in self.cores for c in core.cp.columns_used))
        #: the columns made the matchers' arrays (each core's :attr:`PatternCore.fed`)
        self.fed = tuple(dict.fromkeys(c for core in self.cores for c in core.fed))
        withins = [c.within_ns for c in self.cores]
        self.within_ns = None if any(w is None for w in withins) else max(withins)
        self.out_columns = [head.eid, head.ts, *([tag] if tag else []), *self.partition_by,
                            *dict.fromkeys(m for c in self.cores for m in c.measures), PROV_IDS, PROV_TS]
        self._out_names = tuple(self.out_columns)
        self._kept = head.kept | {tag}
        #: the matchers take the watermark as int64 ns (every core's event time is a timestamp)
        self._ns_clock = all(c.kind.startswith("dt:") for c in self.cores)

    @classmethod
    def of(cls, patterns: PatternCore | PatternSet) -> PatternSet:
        """``patterns`` as a set (one core: a set of one, untagged)."""
        return patterns if isinstance(patterns, PatternSet) else cls((patterns,))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.cp.name for c in self.cores)

    # -- the live path ---------------------------------------------------------------------

    def take(self, buf: KeyBuffer, frame: pd.DataFrame, key: tuple | None = None) -> None:
        """Add a key's new rows to ``buf`` (:meth:`PatternCore.take`: once for every
        pattern, keeping the columns any of them reads)."""
        self.head.take(buf, frame, key, self.columns)

    def ready(self, buf: KeyBuffer, wm_ns: int | None) -> dict[str, np.ndarray] | None:
        """The rows of ``buf`` the watermark has passed, in ``(event time, row id)`` order."""
        ordered = buf.ordered
        r = self.head.ready(buf, wm_ns)
        if r is None or ordered or len(r[self.order_by]) < 2:
            return r
        ts, rid = r[self.order_by], r[ROW_ID]
        if np.count_nonzero(ts[1:] <= ts[:-1]):  # not strictly increasing: sort
            order = np.lexsort((rid, ts))
            if (order != np.arange(len(order))).any():
                r = {c: a[order] for c, a in r.items()}
        return r

    def watermark(self, wm_ns: int):
        """The watermark (int64 ns UTC) as :meth:`feed` takes it."""
        return wm_ns if self._ns_clock else pd.Timestamp(wm_ns, tz="UTC")

    def feed(self, buf: KeyBuffer, ready: dict[str, np.ndarray] | None, wm,
             before: Callable[[int], KeyState | None]) -> list[tuple[PatternCore, list[Match]]]:
        """Advance every pattern's state in ``buf`` over ``ready`` under watermark ``wm``;
        returns each pattern's matches now final. ``before(i)``: pattern ``i``'s state before
        this step (to feed again when a row fails). A pattern idle on the key keeps no state."""
        cols = memo = None
        if ready is not None:
            cols, memo = self.head.columns(ready, self.fed), {}
        out: list[tuple[PatternCore, list[Match]]] = []
        states: list[KeyState | None] = []
        for i, core in enumerate(self.cores):
            st = buf.matcher_of(i)
            if ready is not None or st is not None:
                got, st = core.feed_arrays(buf.key, st, ready, wm, lambda i=i: before(i), cols, memo)
                if got:
                    out.append((core, got))
                if st is not None and not st.runs and not st.rows_held and not core.numbered:
                    st = None  # an idle key keeps nothing (state bounded by WITHIN)
            states.append(st)
        buf.matchers = tuple(states) if any(s is not None for s in states) else ()
        return out

    def held(self, buf: KeyBuffer) -> list[tuple[np.ndarray, np.ndarray]]:
        """The row ids and event times of the rows the patterns' states in ``buf`` hold
        (:meth:`moirae.patterns.Matcher.held_rows`)."""
        out = []
        for st in buf.matchers:
            h = None if st is None else self.head.matcher.held_rows(st)
            if h is not None:
                out.append(h)
        return out

    def next_deadline(self, buf: KeyBuffer) -> int | None:
        """The earliest WITHIN deadline (ns) of a live run of any pattern on the key."""
        if not buf.matchers:
            return None
        ds = [d for i, c in enumerate(self.cores) if (d := c.matcher.next_deadline(buf.matcher_of(i))) is not None]
        return min(ds, default=None)

    # -- output ----------------------------------------------------------------------------

    def rows(self, got: list[tuple[PatternCore, list[Match]]], prov: dict | ProvTable) -> pd.DataFrame:
        """The matches as output rows, in :attr:`out_columns` order (a measure a pattern
        lacks is NULL in its rows); ``prov`` as :meth:`PatternCore.rows` takes it."""
        if self.tag is None:
            return self.head.rows(got[0][1] if got else [], prov)
        parts = []  # per pattern that matched: its rows' columns, in :attr:`out_columns` order
        for core, matches in got or [(self.head, [])]:
            cols, n = core.row_columns(matches, prov), len(matches)
            cols[self.tag] = np.full(n, core.cp.name, dtype=object)
            parts.append([cols[c] if c in cols else np.full(n, None, dtype=object) for c in self._out_names])
        return concat_frames(self._out_names, parts, self._kept)

    # -- the static path -------------------------------------------------------------------

    def batch(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Every pattern over one key's static rows, then the end of the stream."""
        from moirae.patterns.spark_core import prov_of

        if frame.empty:
            return self.rows([], {})
        frame = self.head.normalize(frame).sort_values([self.order_by, ROW_ID], kind="stable")
        prov = prov_of(frame, self.order_by)
        got = []
        for core in self.cores:
            found, st = core.feed(None, frame, None)
            end, _ = core.matcher.finish(st)
            if found or end:
                got.append((core, found + end))
        return self.rows(got, prov)


__all__ = ["PatternSet"]
