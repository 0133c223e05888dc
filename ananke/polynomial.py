"""How-provenance polynomials of sink tuples (H 4; Green, Karvounarakis and Tannen's N[X]).

Each source tuple is a variable ``x_i`` (its id, :mod:`ananke.ids`). The operators of
:mod:`ananke.query` annotate their outputs in the semiring N[X]:

- filter and map keep the annotation;
- a join multiplies: a joined tuple is ``x_l * x_r``;
- a row pattern's match (T 4) is one derivation of all its bound rows jointly, the
  product ``x_1 * ... * x_n`` of a number of rows that varies from match to match
  (:meth:`PlanTracker.product`; ``degree`` 0 in the plan);
- union and alternative derivations add (a tuple named twice counts twice);
- a window aggregate is a sum in the semimodule N[X] (x) V (Amsterdamer, Deutch and Tannen;
  HUKA's queries have no aggregates, H 7): one term per
  contributing tuple (or joined pair), its monomial beside the tuple's values of the
  aggregated columns, ``sum_j x_j (x) v_j``. ``sum``, ``count``, ``avg``, ``min`` and
  ``max`` are functions of the surviving terms, so they can be evaluated for any set of
  removed or corrected tuples without re-running the query (:mod:`ananke.poly_eval`).

:class:`Poly` is that sum for one sink tuple, factored: the monomials as one flat array
of ids (``degree`` per monomial, the same for every term of a query) and, for a window,
one row of values per monomial. :class:`PolyPlan` is the query's shape, recorded while its
plan is built (:class:`PlanTracker`): which kind of polynomial its sink tuples carry,
which aggregates over which source columns, and the filters after the aggregate (the
event-query's condition) as Spark SQL text. A shape the plan does not cover (a window over
a window, a map that rewrites an aggregated column, an aggregate other than the five)
says so in ``why``; the support (``poly != 0``) is still exact for it.

>>> p = Poly(np.array([1, 2, 3], dtype=np.int64), np.array([[10.0], [20.0], [30.0]]))
>>> p.monomials(), sorted(p.variables())
([(1,), (2,), (3,)], [1, 2, 3])
>>> Poly.from_bytes(p.ids.tolist(), p.to_bytes(), 1) == p
True
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

#: the window aggregates whose value is a function of the surviving terms
AGG_FUNCTIONS = ("sum", "count", "avg", "min", "max")
#: version of :meth:`Poly.to_bytes`; checked when read back
FORMAT = 1


@dataclass(frozen=True)
class AggSpec:
    """One windowed aggregate in semimodule form: output column ``name`` = ``fn`` over the
    terms' values in slot ``slot`` of :attr:`PolyPlan.value_columns` (None: ``count(*)``).
    ``column`` is the source column the slot holds unchanged (None when the argument is
    an expression: removals are exact, a correction of its inputs is not covered)."""

    name: str
    fn: str
    arg: str
    slot: int | None
    column: str | None


@dataclass(frozen=True)
class PolyPlan:
    """One event-query's polynomial shape (see the module docstring)."""

    sink: str
    kind: str  # "row": filter/map/join of sources; "window": an aggregate over rows; "none"
    degree: int = 1
    streams: tuple[str, ...] = ()
    value_columns: tuple[str, ...] = ()
    aggs: tuple[AggSpec, ...] = ()
    keys: tuple[str, ...] = ()
    ts: str = ""
    size_us: int = 0
    slide_us: int = 0
    pre: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()
    covered: bool = True
    why: str = ""
    #: source columns a join's condition or a window's keys read: correcting them moves a
    #: tuple between results, which the polynomial alone cannot say
    structural: tuple[str, ...] = ()
    #: sink columns still holding their source tuple's values (one-source "row" plans)
    mirror: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["version"] = FORMAT
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PolyPlan:
        if d.get("version") != FORMAT:
            raise ValueError(f"polynomial plan of {d.get('sink')!r}: version {d.get('version')!r}, expected {FORMAT}")
        d = {k: v for k, v in d.items() if k != "version"}
        d["aggs"] = tuple(AggSpec(**a) for a in d.get("aggs", ()))
        for k in ("streams", "value_columns", "keys", "pre", "conditions", "structural", "mirror"):
            d[k] = tuple(d.get(k, ()))
        return cls(**d)


@dataclass(frozen=True, eq=False)
class Poly:
    """One sink tuple's polynomial ``sum_j prod(monomial_j) (x) values_j``.

    ``ids`` holds ``m * degree`` source ids, monomial ``j`` being
    ``ids[j*degree:(j+1)*degree]`` (``degree`` 0: one monomial of every id, a pattern's); ``values`` (windows only) is ``m x k`` float64, NaN
    for SQL NULL, column ``c`` holding :attr:`PolyPlan.value_columns` ``[c]``."""

    ids: np.ndarray
    values: np.ndarray | None = None
    degree: int = 1

    def __post_init__(self) -> None:
        if self.degree == 0:  # a plan of degree 0: one monomial, the product of every id
            object.__setattr__(self, "degree", max(len(self.ids), 1))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Poly) or self.degree != other.degree or not np.array_equal(self.ids, other.ids):
            return False
        if self.values is None or other.values is None:
            return self.values is None and other.values is None
        return np.array_equal(self.values, other.values, equal_nan=True)

    __hash__ = None  # type: ignore[assignment]

    @property
    def terms(self) -> int:
        return len(self.ids) // self.degree

    def monomials(self) -> list[tuple[int, ...]]:
        d = self.degree
        ids = self.ids.tolist()
        return [tuple(ids[j * d:(j + 1) * d]) for j in range(self.terms)]

    def variables(self) -> set[int]:
        return set(self.ids.tolist())

    def to_bytes(self) -> bytes:
        """The values as stored (the ids go to an indexed array column): a header
        (format, rows, columns) and the float64 matrix, little-endian."""
        if self.values is None:
            return struct.pack("<BII", FORMAT, 0, 0)
        m, k = self.values.shape
        return struct.pack("<BII", FORMAT, m, k) + np.ascontiguousarray(self.values, dtype="<f8").tobytes()

    @classmethod
    def from_bytes(cls, ids, blob: bytes | None, degree: int = 1) -> Poly:
        """Rebuild from the stored ids and :meth:`to_bytes`."""
        arr = np.asarray(ids, dtype=np.int64)
        if not blob:
            return cls(arr, None, degree)
        version, m, k = struct.unpack_from("<BII", blob)
        if version != FORMAT:
            raise ValueError(f"polynomial values in format {version}, expected {FORMAT}")
        if m == 0 and k == 0:
            return cls(arr, None, degree)
        vals = np.frombuffer(blob, dtype="<f8", offset=9, count=m * k).reshape(m, k).astype(np.float64)
        return cls(arr, vals, degree)


@dataclass
class _Track:
    """What the tracker knows of one operator's output stream."""

    kind: str  # "row" | "window" | "none"
    degree: int = 1
    streams: tuple[str, ...] = ()
    ts: str = ""
    mirror: frozenset[str] = frozenset()  # columns holding a source's values unchanged (degree 1)
    pre: tuple[str, ...] = ()
    structural: tuple[str, ...] = ()
    window: dict = field(default_factory=dict)
    agg_cols: frozenset[str] = frozenset()  # window outputs still equal to the aggregates / keys
    conditions: tuple[str, ...] = ()
    covered: bool = True
    why: str = ""


class PlanTracker:
    """Records, operator by operator, the polynomial shape of each stream of a
    :class:`~ananke.query.ProvQuery` (node id -> what its tuples' polynomials look like).
    :mod:`ananke.query` calls it; :meth:`plan` gives a sink's :class:`PolyPlan`."""

    def __init__(self) -> None:
        self._t: dict[int, _Track] = {}

    def get(self, node: int) -> _Track:
        return self._t.get(node, _Track("none", covered=False, why="an operator the tracker did not see"))

    def source(self, node: int, stream: str, ts: str, columns: Sequence[str]) -> None:
        self._t[node] = _Track("row", 1, (stream,), ts, frozenset(columns) | {ts})

    def filter(self, src: int, node: int, sql: str | None) -> None:
        t = replace(self.get(src))
        if sql is None:
            t.covered, t.why = False, t.why or "a filter whose condition has no SQL text"
        elif t.kind == "row":
            t.pre = (*t.pre, sql)
        elif t.kind == "window":
            t.conditions = (*t.conditions, sql)
        self._t[node] = t

    def map(self, src: int, node: int, kept: Sequence[str], out_columns: Sequence[str]) -> None:
        """A map whose output has ``out_columns``, of which ``kept`` are input columns
        passed on plainly (same name, same values)."""
        t = replace(self.get(src))
        kept_set = frozenset(kept)
        t.mirror = t.mirror & kept_set
        if t.kind == "window":
            lost = {c for c in t.agg_cols if c not in kept_set and c in set(out_columns)}
            t.agg_cols = t.agg_cols & kept_set
            if lost and t.covered:
                t.covered, t.why = False, f"a map after the window rewrites {sorted(lost)}"
        self._t[node] = t

    def window(self, src: int, aggs: Sequence[tuple[str, str, str, bool, bool, str | None]],
               keys: Sequence[str], size_us: int, slide_us: int) -> tuple[_Track, tuple[str, ...]]:
        """A window over ``src``; ``aggs`` as (name, function, argument SQL, distinct,
        filtered, plain argument column or None). Returns the output's track (give it
        to :meth:`bind` with the window's node) and the value expressions (Spark SQL) to
        collect per contributing tuple, in slot order."""
        t = self.get(src)
        out = _Track("window", t.degree, t.streams, t.ts, frozenset(), t.pre, t.structural)
        out.agg_cols = frozenset([a[0] for a in aggs] + [str(k) for k in keys])
        out.window = {"keys": tuple(str(k) for k in keys), "size_us": size_us, "slide_us": slide_us}
        if t.kind != "row" or t.degree == 0:
            out.kind, out.covered = "none", False
            out.why = "a window over a row pattern" if t.kind == "row" else "a window over a window (nested aggregates)"
            return out, ()
        bad_keys = [k for k in keys if not isinstance(k, str) or k not in t.mirror]
        # a corrected key or event time moves the tuple to another window
        out.structural = tuple(sorted({*t.structural, t.ts, *(k for k in keys if isinstance(k, str))}))
        if not t.covered:
            out.covered, out.why = False, t.why
        elif bad_keys:
            out.covered, out.why = False, f"window keys {bad_keys} are not source columns"
        slots: list[str] = []
        specs = []
        for name, fn, arg, distinct, filtered, column in aggs:
            problem = ("DISTINCT" if distinct else "a FILTER clause" if filtered
                       else None if fn in AGG_FUNCTIONS else f"the aggregate {fn}")
            if problem is None and t.degree > 1 and not (fn == "count" and arg == "1"):
                problem = "a value aggregate over joined tuples"
            if problem is not None:
                if out.covered:
                    out.covered, out.why = False, f"{name}: {problem}"
                specs.append(AggSpec(name, fn, arg, None, None))
                continue
            if fn == "count" and arg == "1":
                specs.append(AggSpec(name, fn, arg, None, None))
                continue
            if arg not in slots:
                slots.append(arg)
            specs.append(AggSpec(name, fn, arg, slots.index(arg), column if column in t.mirror else None))
        out.window["aggs"] = tuple(specs)
        out.window["value_columns"] = tuple(slots)
        return out, tuple(slots)

    def bind(self, node: int, track: _Track) -> None:
        self._t[node] = track

    def join(self, left: int, right: int, node: int, on: Sequence[str]) -> None:
        lt, rt = self.get(left), self.get(right)
        if lt.kind != "row" or rt.kind != "row" or 0 in (lt.degree, rt.degree):
            self._t[node] = _Track("none", lt.degree + rt.degree, (*lt.streams, *rt.streams), covered=False,
                                   why="a join of an aggregate" if 0 not in (lt.degree, rt.degree)
                                   else "a join of a row pattern")
            return
        t = _Track("row", lt.degree + rt.degree, (*lt.streams, *rt.streams), "", frozenset(),
                   (*lt.pre, *rt.pre), tuple(sorted({*lt.structural, *rt.structural, *on, lt.ts, rt.ts})),
                   covered=lt.covered and rt.covered, why=lt.why or rt.why)
        self._t[node] = t

    def product(self, src: int, node: int, reads: Sequence[str]) -> None:
        """An operator each of whose outputs is one derivation of several input tuples
        jointly (a row pattern's match, T 4): its polynomial is the product of the
        variables of its provenance, of a degree that varies per output (0 in the plan).
        Removing any of them removes the output. ``reads`` are the input columns that
        decide which tuples form an output (DEFINE, PARTITION BY, ORDER BY): correcting
        one may change the outputs, so it is structural. The outputs' other values (a
        pattern's MEASURES) are not kept per tuple: one monomial has no room for them, so
        the plan covers the support and the outputs' standing, not new measure values."""
        t = self.get(src)
        if t.kind != "row":
            self._t[node] = _Track("none", 1, t.streams, covered=False, why="a row pattern over an aggregate")
            return
        self._t[node] = _Track("row", 0, t.streams, t.ts, frozenset(), t.pre,
                               tuple(sorted({*t.structural, *reads})), covered=t.covered, why=t.why)

    def carries_values(self, node: int) -> bool:
        """Whether ``node``'s provenance structs carry value fields (a covered window
        over single source tuples)."""
        t = self._t.get(node)
        return bool(t and t.kind == "window" and t.degree == 1 and t.window.get("value_columns"))

    def plan(self, node: int, sink: str) -> PolyPlan:
        t = self.get(node)
        w = t.window
        return PolyPlan(sink, t.kind, t.degree if t.kind != "none" else 1, t.streams, tuple(w.get("value_columns", ())), tuple(w.get("aggs", ())),
                        tuple(w.get("keys", ())), t.ts, int(w.get("size_us", 0)), int(w.get("slide_us", 0)), t.pre,
                        t.conditions, t.covered, t.why, t.structural,
                        tuple(sorted(t.mirror)) if t.kind == "row" and t.degree == 1 else ())
