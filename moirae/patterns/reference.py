"""The brute-force reference matcher: the test oracle (docs/PATTERNS.md).

It reads the pattern's semantics straight off its syntax tree, independent of the
automaton code (:mod:`moirae.patterns.nfa`, :mod:`moirae.patterns.matcher`): per key, over
the whole sequence, for each start row in order it backtracks through the pattern in
preference order (greedy quantifiers try one more iteration first, reluctant ones one
fewer, ``|`` its left branch, ``NOT(R)`` and ``ANY*`` the longest run first) and takes the
first complete match whose rows lie within WITHIN of its first row; AFTER MATCH SKIP gives
the next start. Every predicate is evaluated row by row. Exponential in the worst case:
for tests on short sequences only.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from moirae.patterns.bound import Bindings, RowStore, holds, measures
from moirae.patterns.compile import CompiledPattern
from moirae.patterns.evaluate import column_array
from moirae.patterns.expr import row_local
from moirae.patterns.match import Match, key_rows, make_match, resume, ts_ns
from moirae.patterns.syntax import Alt, AnyRow, Node, Not, Quant, Seq, Sym

Result = tuple[int, Bindings] | None
Cont = Callable[[int, Bindings], Result]


def reference_matches(cp: CompiledPattern, rows: pd.DataFrame) -> list[Match]:
    """Every match of ``cp`` in ``rows`` (all keys, each key's whole sequence), by key then start."""
    out: list[Match] = []
    for key, part in key_rows(rows, cp.partition_by, cp.order_by, cp.row_id):
        out += _key_matches(cp, key, part)
    return out


def _key_matches(cp: CompiledPattern, key: tuple, part: pd.DataFrame) -> list[Match]:
    ts, kind = ts_ns(part[cp.order_by])
    rid = part[cp.row_id].to_numpy()
    names = cp.columns_used
    store = RowStore({c: column_array(part[c]) for c in names}, 0)
    n, within = len(part), cp.within_ns
    defines = {cp.symbols.index(s): e for s, e in cp.statement.defines.items() if s in cp.symbols}
    local_cache: dict[tuple[int, int], bool] = {}

    def pred(sym: int, i: int, b: Bindings) -> bool:
        e = defines[sym]
        if row_local(e):
            got = local_cache.get((sym, i))
            if got is None:
                got = local_cache[(sym, i)] = holds(e, sym, store, i, names, (), cp.symbols, cp.name, rid[i])
            return got
        return holds(e, sym, store, i, names, b, cp.symbols, cp.name, rid[i])

    def match_at(s: int) -> Result:
        deadline = None if within is None else ts[s] + within

        def ok(i: int) -> bool:
            return i < n and (deadline is None or ts[i] < deadline)

        def m(node: Node, i: int, b: Bindings, k: Cont) -> Result:
            if isinstance(node, Sym):
                sym = cp.symbols.index(node.name)
                return k(i + 1, (*b, (i, sym))) if ok(i) and pred(sym, i, b) else None
            if isinstance(node, AnyRow):
                return k(i + 1, b) if ok(i) else None
            if isinstance(node, Seq):
                items = node.items

                def go(j: int, i2: int, b2: Bindings) -> Result:
                    return k(i2, b2) if j == len(items) else m(items[j], i2, b2, lambda i3, b3: go(j + 1, i3, b3))
                return go(0, i, b)
            if isinstance(node, Alt):
                for br in node.branches:
                    r = m(br, i, b, k)
                    if r is not None:
                        return r
                return None
            if isinstance(node, Not):
                body = node.body
                assert body is not None
                longest = 0
                while ok(i + longest):
                    longest += 1
                for length in range(longest, -1, -1):
                    end = i + length
                    if m(body, i, (), lambda i2, _b, end=end: (i2, ()) if i2 == end else None) is None:
                        r = k(end, b)
                        if r is not None:
                            return r
                return None
            assert isinstance(node, Quant) and node.body is not None
            q = node

            def rep(count: int, i2: int, b2: Bindings) -> Result:
                def more() -> Result:
                    if q.hi is not None and count >= q.hi:
                        return None
                    return m(q.body, i2, b2, lambda i3, b3: rep(count + 1, i3, b3))  # type: ignore[arg-type]
                if count < q.lo:
                    return more()
                first, second = (more, lambda: k(i2, b2)) if q.greedy else (lambda: k(i2, b2), more)
                r = first()
                return r if r is not None else second()
            return rep(0, i, b)

        return m(cp.statement.pattern, s, (), lambda i, b: (i, b))

    out: list[Match] = []
    s, number = 0, 0
    skip, target = cp.skip
    while s < n:
        r = match_at(s)
        if r is None:
            s += 1
            continue
        end, bound = r
        last = end - 1
        number += 1
        ms = measures(cp.statement.measures, store, s, last, names, bound, cp.symbols, number, cp.name)
        out.append(make_match(cp.name, key, number, s, last, bound, cp.symbols, ts, rid, 0, kind, ms))
        s = resume(skip, target, s, last, bound, cp.symbols)
    return out


__all__ = ["reference_matches"]
