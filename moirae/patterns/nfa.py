"""The symbolic automaton of a pattern, with SQL preferment (T 3, Def. 3.3; docs/PATTERNS.md).

A pattern compiles (Thompson's construction) to a program whose consuming instructions
test one symbol's predicate (or ⊤ for ANY). Epsilon splits are ordered: the first branch
is preferred (greedy quantifiers prefer another iteration, reluctant ones leaving, ``|``
its left branch), so a list of live *positions* kept in preference order, de-duplicated
and cut at the first accepting one, gives exactly the match a backtracking matcher would
prefer (the Pike VM). ``NOT(R)`` is one position carrying the subset state of R's own
automaton: it stays live on every row and may be left whenever R does not accept the rows
it consumed (the complement of T 3, Def. 3.2).

A position is a program counter (a symbol test) or ``(pc, (inner positions, accepting))``
(a NOT); :data:`MATCH` marks acceptance. :class:`LazyDFA` determinizes the preference-ordered
position lists over minterms (bitmasks of which symbols hold) on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from moirae.patterns.syntax import Alt, AnyRow, Node, Not, Quant, Seq, Sym

MATCH = -1
ANY = -1
Position = object


class Program:
    """Instructions: ``("sym", symbol index or ANY, next)``, ``("split", a, b)``,
    ``("not", inner Program, next)``, ``("match",)``; ``start`` is the first."""

    def __init__(self, node: Node, symbols: Sequence[str]):
        self.code: list[tuple] = [("match",)]
        self.index = {s: i for i, s in enumerate(symbols)}
        self.start = self._comp(node, 0)
        self._closure: dict[int, tuple] = {}
        inner = self.closure(self.start)
        self.initial: tuple = tuple(p for p in inner if p != MATCH)
        self.nullable = MATCH in inner

    def _emit(self, ins: tuple) -> int:
        self.code.append(ins)
        return len(self.code) - 1

    def _comp(self, n: Node, nxt: int) -> int:
        if isinstance(n, Sym):
            return self._emit(("sym", self.index[n.name], nxt))
        if isinstance(n, AnyRow):
            return self._emit(("sym", ANY, nxt))
        if isinstance(n, Seq):
            for item in reversed(n.items):
                nxt = self._comp(item, nxt)
            return nxt
        if isinstance(n, Alt):
            starts = [self._comp(b, nxt) for b in n.branches]
            cur = starts[-1]
            for s in reversed(starts[:-1]):
                cur = self._emit(("split", s, cur))
            return cur
        if isinstance(n, Not):
            assert n.body is not None
            return self._emit(("not", Program(n.body, list(self.index)), nxt))
        assert isinstance(n, Quant) and n.body is not None
        if n.hi is None:
            loop = self._emit(("split", 0, 0))
            body = self._comp(n.body, loop)
            self.code[loop] = ("split", body, nxt) if n.greedy else ("split", nxt, body)
            tail = loop
        else:
            tail = nxt
            for _ in range(n.hi - n.lo):
                body = self._comp(n.body, tail)
                tail = self._emit(("split", body, nxt) if n.greedy else ("split", nxt, body))
        for _ in range(n.lo):
            tail = self._comp(n.body, tail)
        return tail

    def closure(self, pc: int) -> tuple:
        """The positions reachable from ``pc`` without consuming a row, in preference order."""
        got = self._closure.get(pc)
        if got is None:
            out: list = []
            self._walk(pc, out, set())
            got = self._closure[pc] = tuple(out)
        return got

    def _walk(self, pc: int, out: list, seen: set) -> None:
        if pc in seen:
            return
        seen.add(pc)
        ins = self.code[pc]
        kind = ins[0]
        if kind == "match":
            out.append(MATCH)
        elif kind == "sym":
            out.append(pc)
        elif kind == "split":
            self._walk(ins[1], out, seen)
            self._walk(ins[2], out, seen)
        else:  # not: consume inside (preferred), or leave at once if R rejects the empty run
            inner: Program = ins[1]
            out.append((pc, (frozenset(inner.initial), inner.nullable)))
            if not inner.nullable:
                self._walk(ins[2], out, seen)

    def step(self, pos, ok: Callable[[int], bool]) -> tuple | None:
        """The successors of ``pos`` after it consumes a row (``ok(i)``: symbol i holds there),
        in preference order, or None if ``pos`` rejects the row."""
        if type(pos) is int:
            _, sym, nxt = self.code[pos]
            if sym != ANY and not ok(sym):
                return None
            return self.closure(nxt)
        pc, (inner_set, _) = pos
        _, inner, nxt = self.code[pc]
        new_set, accepting = inner.subset_step(inner_set, ok)
        me = (pc, (new_set, accepting))
        return (me,) if accepting else (me, *self.closure(nxt))

    def subset_step(self, positions: frozenset, ok: Callable[[int], bool]) -> tuple[frozenset, bool]:
        """The plain (unordered) subset step: the next positions and whether R accepts."""
        out: set = set()
        accepting = False
        for p in positions:
            succ = self.step(p, ok)
            if succ:
                for q in succ:
                    if q == MATCH:
                        accepting = True
                    else:
                        out.add(q)
        return frozenset(out), accepting

    def symbol_of(self, pos) -> int | None:
        """The symbol index a position binds its row to (None for ANY and NOT)."""
        if type(pos) is int:
            sym = self.code[pos][1]
            return None if sym == ANY else sym
        return None


def pike_step(prog: Program, threads: Sequence, ok: Callable[[int], bool]) -> tuple[tuple, bool]:
    """Advance preference-ordered ``threads`` over one row: (the next threads, accepted).

    On acceptance every less preferred thread is cut: it can no longer give the preferred match.
    """
    out: list = []
    seen: set = set()
    for p in threads:
        succ = prog.step(p, ok)
        if succ is None:
            continue
        for q in succ:
            if q == MATCH:
                return tuple(out), True
            if q not in seen:
                seen.add(q)
                out.append(q)
    return tuple(out), False


class LazyDFA:
    """The determinized automaton over minterms, built on demand (state 0 is dead).

    A state is a preference-ordered tuple of positions; ``step(state, mask)`` is
    ``(next state, accepted)``. Only row-local symbols may be in the program.
    """

    def __init__(self, prog: Program):
        self.prog = prog
        self.states: list[tuple] = [()]
        self.ids: dict[tuple, int] = {(): 0}
        self.trans: list[dict[int, tuple[int, bool]]] = [{}]
        self.initial = self.intern(prog.initial)

    def intern(self, threads: tuple) -> int:
        sid = self.ids.get(threads)
        if sid is None:
            sid = self.ids[threads] = len(self.states)
            self.states.append(threads)
            self.trans.append({})
        return sid

    def step(self, sid: int, mask: int) -> tuple[int, bool]:
        got = self.trans[sid].get(mask)
        if got is None:
            nxt, acc = pike_step(self.prog, self.states[sid], lambda i: bool(mask >> i & 1))
            got = self.trans[sid][mask] = (self.intern(nxt), acc)
        return got


__all__ = ["ANY", "MATCH", "LazyDFA", "Program", "pike_step"]
