"""The compiled matcher: per-key, incremental, with explicit state (T 3-4; docs/PATTERNS.md).

For one key's batch of rows (already past the watermark, so in event-time order), the
row-local predicates are evaluated vectorized into one minterm bitmask per row. A run
starts at every row that can begin the pattern (and that AFTER MATCH SKIP has not passed);
each live run walks the lazily determinized automaton (:class:`~moirae.patterns.nfa.LazyDFA`)
one table lookup per row, or, when a DEFINE reads bound rows, the preference-ordered
position list with its bindings (an NFA with runs). A run ends when its automaton dies or
its WITHIN passes (at a row or at the watermark); its best match is then final. Matches
come out in start order, each one cutting the runs AFTER MATCH SKIP passes over, exactly
as :mod:`moirae.patterns.reference` defines them; so the matches do not depend on how a
key's rows are split into batches.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

import numpy as np
import pandas as pd

from moirae.patterns.bound import Bindings, RowStore, holds, measures
from moirae.patterns.compile import CompiledPattern
from moirae.patterns.errors import PatternError, PredicateEvaluationError
from moirae.patterns.evaluate import Env, column_array, evaluate, memo_keys, truth
from moirae.patterns.expr import Col, Prev, walk
from moirae.patterns.match import Match, key_positions, plain_key, resume, to_frame, ts_ns, ts_value
from moirae.patterns.nfa import ANY, MATCH, LazyDFA, Program
from moirae.patterns.state import KeyState

_TS, _RID, _MASK = "__ts", "__rid", "__mask"


def bound_step(prog: Program, threads: tuple, seq: int, mask: int, dep_test, by_position: bool) -> tuple[tuple, Bindings | None]:
    """Advance preference-ordered ``(position, bindings)`` threads over row ``seq``.

    Returns the next threads and, if one accepted, its bindings (every less preferred thread
    is then cut). ``dep_test(i, bindings)`` decides a symbol whose DEFINE reads bound rows.
    With ``by_position`` threads at one position are merged (right when every predicate is
    row-local: they share their future).
    """
    out: list = []
    seen: set = set()
    for pos, binds in threads:
        def ok(i: int, binds=binds) -> bool:
            if dep_test is not None and i in dep_test.symbols:
                return dep_test(i, binds)
            return bool(mask >> i & 1)
        succ = prog.step(pos, ok)
        if succ is None:
            continue
        sym = prog.symbol_of(pos)
        nb = binds if sym is None else (*binds, (seq, sym))
        for q in succ:
            if q == MATCH:
                return tuple(out), nb
            k = q if by_position else (q, nb)
            if k not in seen:
                seen.add(k)
                out.append((q, nb))
    return tuple(out), None


def _busy_rows(cand: list[int], n: int, runs: list):
    """The row indices to process: every row while a run is live, else the next candidate start."""
    i = ci = 0
    while i < n:
        if not runs:
            ci = bisect_left(cand, i, ci)
            if ci >= len(cand):
                return
            i = cand[ci]
        yield i
        i += 1


def _expire(runs: list, t: int, within: int | None) -> None:
    """End the runs whose WITHIN deadline is at or before event time ``t``."""
    if within is not None:
        for r in runs:
            if r[5] and r[4] <= t:
                r[5] = False


def _ties_ordered(ts: np.ndarray, rid: np.ndarray) -> bool:
    """Whether rows with equal event time are already in row-id order."""
    same = np.flatnonzero(np.diff(ts) == 0)
    try:
        return bool(all(rid[i] <= rid[i + 1] for i in same))
    except TypeError:
        return False


class _DepTest:
    """Evaluates dependent DEFINEs on one row for one run's bindings."""

    def __init__(self, cp: CompiledPattern, store: RowStore, seq: int, rid):
        self.cp, self.store, self.seq, self.rid = cp, store, seq, rid
        self.symbols = cp.dependent

    def __call__(self, i: int, binds: Bindings) -> bool:
        cp = self.cp
        return holds(cp.dependent[i], i, self.store, self.seq, cp.columns_used, binds, cp.symbols, cp.name, self.rid)


class Matcher:
    """Runs one :class:`CompiledPattern` over keyed rows, incrementally."""

    def __init__(self, cp: CompiledPattern):
        self.cp = cp
        self.dfa = LazyDFA(cp.program) if cp.deterministic else None
        prog = cp.program
        first_bits, always = 0, False
        for p in prog.initial:
            sym = prog.symbol_of(p)
            if sym is None or sym in cp.dependent:
                always = True
            else:
                first_bits |= 1 << sym
        self._first_bits, self._always = first_bits, always
        self._initial_threads = tuple((p, ()) for p in prog.initial)
        # one symbol, no ANY and no NOT: every row of a match binds that symbol
        tests = {ins[1] for ins in prog.code if ins[0] == "sym"}
        plain = all(ins[0] in ("sym", "split", "match") for ins in prog.code)
        self._single = next(iter(tests)) if plain and len(tests) == 1 and ANY not in tests else None
        self._measure_cols = sorted({c for _, e in cp.statement.measures for n in walk(e)
                                     if isinstance(n, (Col, Prev)) for c in [n.name]})

    # -- public entry points -------------------------------------------------------------

    def advance(self, state: KeyState | None, rows: pd.DataFrame | None, *, watermark=None) -> tuple[list[Match], KeyState | None]:
        """Feed one key's next rows; returns the matches now final and the new state.

        Every row must be later (event time, then row id) than every row fed before for this
        key. ``watermark`` (the event-time column's type) promises that later rows have event
        time at least that: runs whose WITHIN it has passed end. Within WITHIN a match whose
        end is still open (a greedy ``+`` at the pattern's end) waits for the key's next row.
        """
        cp = self.cp
        if rows is None or len(rows) == 0:
            if state is None:
                return [], None
            return self._close(state, self._wm_ns(state, watermark))
        ts, kind = ts_ns(rows[cp.order_by])
        key = plain_key(rows[c].iat[0] for c in cp.partition_by)
        cols = {c: column_array(rows[c]) for c in cp.columns_used}
        return self.advance_arrays(state, key, ts, kind, rows[cp.row_id].to_numpy(), cols, watermark=watermark)

    def advance_arrays(self, state: KeyState | None, key: tuple, ts: np.ndarray, kind: str, rid: np.ndarray,
                       cols: dict[str, np.ndarray], *, watermark=None,
                       memo: dict | None = None) -> tuple[list[Match], KeyState | None]:
        """:meth:`advance` over one key's rows given as arrays: ``ts`` (int64 ns, of ``kind``,
        see :func:`moirae.patterns.match.ts_ns`), row ids, and each column the pattern
        reads as :func:`moirae.patterns.evaluate.column_array` makes it, but the event-time
        column (a timestamp), which may be left out when no DEFINE reads it: MEASURES
        then read it off ``ts``, as the same Timestamps, for the few rows they read
        (:meth:`store`); a key's calls leave it out all or none. ``memo``: the
        row-local sub-expressions' values over these same rows, shared with other patterns
        fed the same arrays (:class:`moirae.patterns.evaluate.Env`); it is only read and
        added to."""
        cp = self.cp
        if len(ts) == 0:
            if state is None:
                return [], None
            return self._close(state, self._wm_ns(state, watermark))
        order = None
        if len(ts) > 1:
            d = np.diff(ts)
            if (d < 0).any() or ((d == 0).any() and not _ties_ordered(ts, rid)):
                order = np.lexsort((rid, ts))
                ts, rid = ts[order], rid[order]
        st = state if state is not None else KeyState(cp.name, key)
        if st.key != key:
            raise PatternError(f"pattern {cp.name!r}: rows of key {key!r} given with the state of key {st.key!r}")
        if st.ts_kind and kind != st.ts_kind:
            raise PatternError(f"pattern {cp.name!r}: key {key!r}: event time changed kind ({st.ts_kind} to {kind})")
        st.ts_kind = kind
        if st.last_ts is not None and ts[0] < st.last_ts:
            raise PatternError(f"pattern {cp.name!r}: key {key!r}: row {rid[0]!r} is earlier "
                               "than rows fed before (rows must come in event-time order, past the watermark)")
        if order is not None:
            cols = {c: a[order] for c, a in cols.items()}
        if order is not None:
            memo = None  # its values are over the rows in the given order
        masks = self._masks(st, cols, len(ts), rid, {} if memo is None else memo)
        n0 = st.next_seq
        self._append(st, cols, ts, rid, masks)
        out = self._run(st, n0, masks, ts)
        return self._close(st, self._wm_ns(st, watermark), out)

    def advance_frame(self, states: Mapping[tuple, KeyState], rows: pd.DataFrame | None, *,
                      watermark=None) -> tuple[list[Match], dict[tuple, KeyState]]:
        """:meth:`advance` for many keys in one frame; keys without rows only see the watermark."""
        new = dict(states)
        out: list[Match] = []
        seen = set()
        if rows is not None and len(rows):
            cp = self.cp
            ordered, parts = key_positions(rows, cp.partition_by, cp.order_by, cp.row_id)
            ts_all, kind = ts_ns(ordered[cp.order_by])
            rid_all = ordered[cp.row_id].to_numpy()
            cols_all = {c: (column_array(ordered[c]), _nullable_bool(ordered[c])) for c in cp.columns_used}
            by_col = [ordered[c] for c in cp.partition_by]
            for gkey, idx in parts:  # each column converted once, sliced per key (as advance converts it)
                seen.add(gkey)
                key = plain_key(s.iat[idx[0]] for s in by_col)
                cols = {c: _as_bool(a[idx]) if nb else a[idx] for c, (a, nb) in cols_all.items()}
                got, st = self.advance_arrays(new.get(gkey), key, ts_all[idx], kind, rid_all[idx], cols,
                                              watermark=watermark)
                out += got
                if st is not None:
                    new[gkey] = st
        if watermark is not None:
            for key in [k for k in new if k not in seen]:
                got, st = self.advance(new[key], None, watermark=watermark)
                out += got
                if st is not None:
                    new[key] = st
        return out, new

    def finish(self, state: KeyState | None) -> tuple[list[Match], KeyState | None]:
        """End of the key's stream: every live run ends and its best match is final."""
        if state is None:
            return [], None
        return self._close(state, None, [], end=True)

    @staticmethod
    def held_rows(state: KeyState | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The row ids and event times (ns) of the rows ``state`` holds (None: none): every
        row a match it may still emit can bind."""
        if state is None or not state.buf or _RID not in state.buf:
            return None
        return state.buf[_RID], state.buf[_TS]

    def next_deadline(self, state: KeyState | None) -> int | None:
        """The earliest event time (ns) at which a live run's WITHIN passes (a timer to set)."""
        if state is None:
            return None
        return min((r[4] for r in state.runs if r[5] and r[4] is not None), default=None)

    def to_frame(self, matches: list[Match]) -> pd.DataFrame:
        """The matches as a frame (see :func:`moirae.patterns.match.to_frame`)."""
        return to_frame(matches, self.cp.partition_by, self.cp.measure_names)

    # -- the work ------------------------------------------------------------------------

    def _wm_ns(self, st: KeyState, watermark) -> int | None:
        if watermark is None:
            return None
        if isinstance(watermark, (int, float, np.integer, np.floating)) and not isinstance(watermark, bool):
            return int(round(float(watermark) * 1e9)) if st.ts_kind == "num" else int(watermark)
        return int(pd.Timestamp(watermark).value)

    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d.pop("_memo_keys", None)  # node ids: valid in this process only
        return d

    def _keys(self) -> dict[int, str]:
        keys = self.__dict__.get("_memo_keys")
        if keys is None:
            keys = self._memo_keys = memo_keys(e for _, e in self.cp.local)
        return keys

    def _masks(self, st: KeyState, cols: dict[str, np.ndarray], n: int, rid: np.ndarray, memo: dict) -> np.ndarray:
        cp = self.cp
        masks = np.zeros(n, dtype=np.int64)
        P = cp.max_prev

        def prev(name: str, k: int) -> np.ndarray:
            tail = st.buf[name][-P:] if st.buf and P else cols[name][:0]
            missing = P - len(tail)
            a = cols[name]
            fill = np.nan if a.dtype.kind == "f" else (np.datetime64("NaT") if a.dtype.kind == "M" else None)
            pad = np.full(missing, fill, dtype=a.dtype if a.dtype.kind in "fM" else object)
            full = np.concatenate([pad, tail, a])
            return full[P - k: P - k + n]

        env = Env(cols, n, prev=prev, memo=memo, keys=self._keys())
        for idx, e in cp.local:
            try:
                ok = truth(evaluate(e, env), n)
            except (TypeError, ValueError, ArithmeticError) as err:
                raise self._which_row(st, cols, n, rid, idx, err) from None
            masks |= ok.astype(np.int64) << idx
        return masks

    def store(self, st: KeyState) -> RowStore:
        """The rows the state holds, the event-time column read off their times when it
        was left out (see :meth:`advance_arrays`)."""
        t, kind = self.cp.order_by, st.ts_kind
        derived = None
        if st.buf and t not in st.buf and t in self.cp.columns_used and kind.startswith("dt:"):
            derived = {t: (_TS, lambda v: ts_value(int(v), kind))}
        return RowStore(st.buf, st.base, derived)

    def _which_row(self, st: KeyState, cols, n: int, rid, idx: int, err: Exception) -> PredicateEvaluationError:
        cp = self.cp
        names = [c for c in cp.columns_used if c in cols and (not st.buf or c in st.buf)]
        merged = {c: np.concatenate([st.buf[c], cols[c]]) if st.buf else cols[c] for c in names}
        store = RowStore(merged, st.base if st.buf else st.next_seq)
        for i in range(n):
            seq = st.next_seq + i
            try:
                holds(dict(cp.local)[idx], idx, store, seq, names, (), cp.symbols, cp.name, rid[i])
            except PredicateEvaluationError as e:
                return e
        return PredicateEvaluationError(f"pattern {cp.name!r}: DEFINE {cp.symbols[idx]} failed: {err}")

    def _append(self, st: KeyState, cols, ts, rid, masks) -> None:
        new = {**cols, _TS: ts, _RID: rid, _MASK: masks}
        if not st.buf or st.rows_held == 0:
            st.buf = {c: np.asarray(a) for c, a in new.items()}
            st.base = st.next_seq
        else:
            if self.cp.order_by in new and self.cp.order_by not in st.buf:
                del new[self.cp.order_by]  # the state reads it off the times (:meth:`store`)
            st.buf = {c: np.concatenate([st.buf[c], np.asarray(a)]) for c, a in new.items()}
        st.next_seq += len(ts)
        st.last_ts = int(ts[-1])

    def _run(self, st: KeyState, n0: int, masks: np.ndarray, ts: np.ndarray) -> list[tuple]:
        """Step every live run over the batch's rows, start runs, emit finished ones (raw)."""
        if self.dfa is not None:
            return self._run_dfa(st, n0, masks, ts)
        cp = self.cp
        within = cp.within_ns
        can = (masks & self._first_bits) != 0
        if self._always:
            can[:] = True
        cand = np.flatnonzero(can).tolist()
        runs = st.runs
        store = self.store(st)
        rid = st.buf[_RID]
        out: list[tuple] = []  # raw matches, made into Match objects by _close
        ml, tl, cl = masks.tolist(), ts.tolist(), can.tolist()
        for i in _busy_rows(cand, len(ml), runs):
            seq, t, m = n0 + i, tl[i], ml[i]
            _expire(runs, t, within)
            if cl[i] and seq >= st.cutoff:
                runs.append([seq, self._initial_threads, -1, None, None if within is None else t + within, True])
            test = _DepTest(cp, store, seq, rid[seq - st.base])
            for r in runs:
                if r[5]:
                    threads, got = bound_step(cp.program, r[1], seq, m, test, False)
                    if got is not None:
                        r[2], r[3] = seq, got
                    r[1] = threads
                    if not threads:
                        r[5] = False
            if runs and runs[-1][0] == seq and not runs[-1][5] and runs[-1][2] < 0:
                runs.pop()  # a run that died on its first row
            if runs and not runs[0][5]:
                self._emit(st, runs, out)
        return out

    def _run_dfa(self, st: KeyState, n0: int, masks: np.ndarray, ts: np.ndarray) -> list[tuple]:
        """:meth:`_run` for the DFA engine: one table lookup per live run and row."""
        dfa = self.dfa
        assert dfa is not None
        within = self.cp.within_ns
        # the initial step, once per distinct minterm: which rows can start a run, in which state
        uniq, inverse = np.unique(masks, return_inverse=True)
        first = [dfa.step(dfa.initial, int(u)) for u in uniq.tolist()]
        starts = np.array([nid != 0 or acc for nid, acc in first], dtype=bool)[inverse]
        cand = np.flatnonzero(starts).tolist()
        inv = inverse.tolist()
        runs = st.runs
        for r in runs:
            r[1] = dfa.intern(r[1])
        out: list[tuple] = []
        ml, tl = masks.tolist(), ts.tolist()
        trans, step = dfa.trans, dfa.step
        for i in _busy_rows(cand, len(ml), runs):
            seq, t, m = n0 + i, tl[i], ml[i]
            _expire(runs, t, within)
            for r in runs:
                if r[5]:
                    got = trans[r[1]].get(m)
                    nid, acc = got if got is not None else step(r[1], m)
                    if acc:
                        r[2] = seq
                    r[1] = nid
                    if nid == 0:
                        r[5] = False
            if starts[i] and seq >= st.cutoff:
                nid, acc = first[inv[i]]
                runs.append([seq, nid, seq if acc else -1, None, None if within is None else t + within, nid != 0])
            if runs and not runs[0][5]:
                self._emit(st, runs, out)
        return out

    def _emit(self, st: KeyState, runs: list[list], out: list[tuple]) -> None:
        cp = self.cp
        store = None
        while runs and not runs[0][5]:
            r = runs.pop(0)
            if r[2] < 0:
                continue
            first, last = r[0], r[2]
            if self.dfa is None:
                bound = r[3]
            elif self._single is not None:
                bound = tuple((seq, self._single) for seq in range(first, last + 1))
            else:
                bound = self._classify(st, first, last)
            st.match_number += 1
            ms: dict[str, object] = {}
            if cp.statement.measures:
                store = store or self.store(st)
                ms = measures(cp.statement.measures, store, first, last, self._measure_cols, bound, cp.symbols,
                              st.match_number, cp.name)
            out.append((st.match_number, first, last, bound, ms))
            q = resume(cp.skip[0], cp.skip[1], first, last, bound, cp.symbols)
            st.cutoff = max(st.cutoff, q)
            while runs and runs[0][0] < q:  # runs are in start order
                runs.pop(0)

    def _materialize(self, st: KeyState, raw: list) -> list[Match]:
        cp = self.cp
        rid = st.buf[_RID]
        lo = min(r[1] for r in raw) - st.base
        hi = max(r[2] for r in raw) - st.base + 1
        rids = [None] * lo + rid[lo:hi].tolist()
        ts = st.buf[_TS]
        base, kind, syms = st.base, st.ts_kind, cp.symbols
        return [Match(cp.name, st.key, number, ts_value(int(ts[first - base]), kind), ts_value(int(ts[last - base]), kind),
                      rids[first - base], rids[last - base], tuple((rids[seq - base], syms[s]) for seq, s in bound), ms)
                for number, first, last, bound, ms in raw]

    def _classify(self, st: KeyState, first: int, last: int) -> Bindings:
        """Which symbol each row of the match binds: the preferred path ending at ``last``."""
        threads = self._initial_threads
        masks = st.buf[_MASK]
        for seq in range(first, last + 1):
            threads, got = bound_step(self.cp.program, threads, seq, int(masks[seq - st.base]), None, True)
            if seq == last:
                assert got is not None, "the automaton's match has no path"
                return got
        raise AssertionError("unreachable")

    def _close(self, st: KeyState, wm: int | None, out: list[tuple] | None = None, end: bool = False):
        out = [] if out is None else out
        for r in st.runs:
            if r[5] and (end or (wm is not None and r[4] is not None and r[4] <= wm)):
                r[5] = False
        if self.dfa is not None:
            for r in st.runs:
                if type(r[1]) is not int:
                    r[1] = self.dfa.intern(r[1])
        self._emit(st, st.runs, out)
        if out:  # rows leave the buffer below: make the matches while their rows are here
            out = self._materialize(st, out)
        if self.dfa is not None:
            for r in st.runs:
                r[1] = self.dfa.states[r[1]]
        keep = min([r[0] for r in st.runs] + [st.next_seq - self.cp.max_prev])
        if st.buf and keep > st.base:
            cut = keep - st.base
            st.buf = {c: a[cut:] for c, a in st.buf.items()}
            st.base = keep
        return out, st


__all__ = ["Matcher", "bound_step"]


def _nullable_bool(s: pd.Series) -> bool:
    """Whether ``column_array`` of a slice of ``s`` depends on the slice: a nullable
    boolean column is bool where the slice has no NA, objects with None where it has."""
    return not isinstance(s.dtype, np.dtype) and pd.api.types.is_bool_dtype(s.dtype)


def _as_bool(a: np.ndarray) -> np.ndarray:
    """A slice of a nullable boolean column (objects with None) as ``column_array`` gives
    that slice alone: bool when it holds no None."""
    if a.dtype == object and not any(v is None for v in a):
        return a.astype(bool)
    return a
