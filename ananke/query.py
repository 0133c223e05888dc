"""Backward provenance for PySpark DataFrames: GeneaLog-style wrappers (A 2.3, Listing 1).

The user writes the query through :class:`ProvQuery` and :class:`Provenanced`; every
wrapper both builds the Spark plan and records the operator in an
:class:`~ananke.graph.OperatorGraph`, from which U follows (A 4). The provenance column
:data:`~ananke.ids.PROV` is managed by the wrappers alone:

- ``source`` sets it to the one struct ``(xxhash64(stream, ts, payload), ts)``;
- ``filter`` / ``select`` / ``with_column`` carry it unchanged (one input, one output);
- ``window`` (tumbling or sliding, event time) sets it to the array of the provenance of
  every tuple falling in the window (a ``collect_list``);
- ``join`` (stream-stream, bounded in time) sets it to the concatenation of both sides';
- ``sink`` hands it on as an array in every case.

Why a source tuple carries one struct and not a one-element array, and why nothing
de-duplicates inside Spark: a window's provenance lives in Spark's state store and grows
with every row of the window. A window over source tuples keeps it as two flat lists of
primitives (the ids, the times; one ``collect_list`` each, updated and merged row by row
together, so position i of both is one tuple) and zips them into the array of structs
only for the rows it emits; ``collect_list`` of the struct would keep one element object
per row, which is slower. ``flatten(collect_list(array))`` (a window over windows or
joins) builds an array of arrays first. De-duplicating with ``array_distinct`` on
structs would compare every pair of elements, quadratic in the rows of a window and
key, so it is not done. An array may therefore name a source tuple twice (two identical tuples have
one id, a self-join meets a tuple from both sides); its consumers take the set:
:meth:`ananke.ank1.Ank1Logic.on_tuple` emits each edge once per sink tuple, ANK-N groups
its items by id.

The output event time of a window is Spark's ``window_time`` (the right boundary minus
one microsecond: within the window, which Theorem 4.1's footnote allows, and usable as the
event time of a chained window). A join's output time is the later of its two inputs.
With ``enabled=False`` the same query is built without any provenance (a baseline).

With ``digest=True`` a window that reads one source through maps keeping its keys and
event time (no filter) keeps only a digest of its provenance, resolved from the archive
at the sink (:mod:`ananke.digest`); every other operator, and any window or join after
such a window, uses the lists above. Both plans are built side by side and the sink picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from ananke.digest import DigestSpec
from ananke.errors import ProvenanceError
from ananke.graph import OperatorGraph
from ananke.ids import PROV, prov_struct_col, sink_id_col, spark_interval, to_timedelta
from ananke.polynomial import PlanTracker, PolyPlan

ZERO = timedelta(0)
PROV_TYPE = "array<struct<id:bigint,ts:timestamp>>"
_PROV_IDS, _PROV_TS = f"{PROV}_ids", f"{PROV}_ts"  # a window's provenance in its state
_DIGEST_N, _DIGEST_X = f"{PROV}_n", f"{PROV}_x"  # a digest window's state (ananke.digest)
_PROV_V = f"{PROV}_v"  # a window's per-tuple values, one list per argument (ananke.polynomial)


class ProvQuery:
    """A set of instrumented queries sharing one operator graph (and hence one U)."""

    def __init__(self, enabled: bool = True, digest: bool = False, polynomials: bool = False) -> None:
        self.graph = OperatorGraph()
        self.enabled = enabled
        #: windows over one source keep a digest, resolved at the sink (ananke.digest)
        self.digest = enabled and digest
        self._sinks: dict[str, ProvSink] = {}
        #: the polynomial shape of each stream (ananke.polynomial), when polynomials are kept
        self.poly: PlanTracker | None = PlanTracker() if enabled and polynomials else None

    def source(self, df, stream: str, ts: str, cols: Sequence[str] | None = None,
               lateness: timedelta | str | None = None) -> Provenanced:
        """Instrument a source stream. ``cols`` are the payload columns hashed into the id
        (default: every column but ``ts``); ``lateness`` sets Spark's watermark delay."""
        if ts not in df.columns:
            raise ProvenanceError(f"source {stream!r}: no event-time column {ts!r} in {df.columns}")
        cols = [c for c in df.columns if c != ts] if cols is None else list(cols)
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ProvenanceError(f"source {stream!r}: payload columns {missing} not in {df.columns}")
        if lateness is not None:
            df = df.withWatermark(ts, spark_interval(lateness))
        if self.enabled:
            df = df.withColumn(PROV, prov_struct_col(stream, ts, cols))
        node = self.graph.add("source", stream, lateness=to_timedelta(lateness or ZERO))
        if self.poly is not None:
            self.poly.source(node, stream, ts, [c for c in df.columns if c != PROV])
        origin = Origin(stream, ts, frozenset(df.columns) - {PROV}) if self.digest else None
        return Provenanced(self, df, ts, node, single=self.enabled, origin=origin)

    @property
    def U(self) -> timedelta:  # noqa: N802 - the paper's name
        return self.graph.U

    def u_k(self, sink: str) -> timedelta:
        return self.graph.u_k(sink)

    def graph_dict(self) -> dict:
        return self.graph.to_dict()

    @property
    def sinks(self) -> dict[str, ProvSink]:
        return dict(self._sinks)


@dataclass(frozen=True)
class Origin:
    """The source a stream still mirrors: its name, its event-time column, and the source
    columns that still hold the source's values (a digest window may group by them)."""

    stream: str
    ts: str
    columns: frozenset[str]


@dataclass(frozen=True)
class Lazy:
    """The same plan as a :class:`Provenanced`'s, with a digest window's provenance
    (a struct per row, :mod:`ananke.digest`) in place of its list."""

    df: object
    spec: DigestSpec


@dataclass(frozen=True)
class Provenanced:
    """An instrumented streaming DataFrame: the plan, its event-time column, its node."""

    query: ProvQuery
    df: object
    ts: str
    node: int
    #: the provenance column is one struct (a source tuple's own), not an array of them
    single: bool = False
    #: set while the stream is its source's tuples, keys and time unchanged (digest mode)
    origin: Origin | None = None
    #: the digest plan, after a digest window and the filters and maps that followed it
    lazy: Lazy | None = None

    def _next(self, df, kind: str, name: str, lag: timedelta = ZERO, ts: str | None = None,
              single: bool | None = None, origin: Origin | None = None, lazy=None, **params) -> Provenanced:
        """The next operator's stream. ``lazy`` maps this stream's digest plan to the
        next one's (the same operator applied to it); without it the digest plan ends."""
        node = self.query.graph.add(kind, name, [(self.node, lag)], **params)
        nxt = None
        if lazy is not None and self.lazy is not None:
            from pyspark.errors import AnalysisException

            try:
                nxt = Lazy(lazy(self.lazy.df), self.lazy.spec)
            except AnalysisException:  # an expression bound to the list plan's columns: lists then
                nxt = None
        return Provenanced(self.query, df, ts or self.ts, node, self.single if single is None else single,
                           origin, nxt)

    def _prov_array(self, col):
        """This stream's provenance (the column ``col``) as an array."""
        from pyspark.sql import functions as F

        return F.array(col) if self.single else col

    def _plain(self, col):
        """This stream's provenance without the values a window keeps for polynomials
        (so both sides of a join have one type)."""
        from pyspark.sql import functions as F

        if self.query.poly is None or not self.query.poly.carries_values(self.node):
            return col
        return F.transform(col, lambda p: F.struct(p["id"].alias("id"), p["ts"].alias("ts")))

    @property
    def columns(self) -> list[str]:
        """The user-visible columns (without the provenance column)."""
        return [c for c in self.df.columns if c != PROV]

    def filter(self, condition, name: str = "filter") -> Provenanced:
        """Forward tuples for which ``condition`` holds; provenance unchanged."""
        out = self._next(self.df.filter(condition), "filter", name, lazy=lambda d: d.filter(condition))
        if self.query.poly is not None:
            from ananke.poly_spark import condition_sql

            self.query.poly.filter(self.node, out.node, condition_sql(self.df, condition))
        return out

    def select(self, *cols, name: str = "map") -> Provenanced:
        """A Map: project / compute columns. The event-time column is kept even if not named."""
        out = self.df.select(*cols).columns
        extra = [] if self.ts in out else [self.ts]
        prov = [PROV] if self.query.enabled else []
        origin = None
        named = {c for c in cols if isinstance(c, str)}
        if self.origin is not None and (self.ts in named or self.ts not in out):  # an expression named ts is a new time
            # only columns named plainly keep the source's values
            origin = Origin(self.origin.stream, self.origin.ts, self.origin.columns & (named | {self.ts}))
        nxt = self._next(self.df.select(*cols, *extra, *prov), "map", name, origin=origin,
                         lazy=lambda d: d.select(*cols, *extra, *prov))
        if self.query.poly is not None:
            self.query.poly.map(self.node, nxt.node, [c for c in (*named, *extra) if c in self.df.columns], out)
        return nxt

    def with_column(self, name_: str, expr, name: str = "map") -> Provenanced:
        """A Map adding (or replacing) one column."""
        if name_ in (PROV, self.ts):
            raise ProvenanceError(f"column {name_!r} is managed by the wrappers and cannot be replaced")
        origin = None
        if self.origin is not None:
            origin = Origin(self.origin.stream, self.origin.ts, self.origin.columns - {name_})
        nxt = self._next(self.df.withColumn(name_, expr), "map", name, origin=origin,
                         lazy=lambda d: d.withColumn(name_, expr))
        if self.query.poly is not None:
            self.query.poly.map(self.node, nxt.node, [c for c in self.df.columns if c != name_], nxt.df.columns)
        return nxt

    def stateful(self, df, lag: timedelta, ts: str, name: str, hold: timedelta = ZERO,
                 reads: Sequence[str] | None = None, **params) -> Provenanced:
        """A stateful operator whose plan ``df`` was built over this stream's elsewhere (a
        row pattern, T 4: ``moirae/patterns/spark_operator.py``). ``df``'s provenance column
        is already an array of the contributing source tuples. Recorded as a Map
        (``operator`` in its params names what it is) with:

        - ``lag``: how much older than an output its inputs are at most, so U follows (A 4);
        - ``hold``: how far below the watermark of Spark's previous micro-batch an output
          may still be emitted (an operator that holds an output until it can no longer
          change). A sink after it lowers its watermark by that much
          (:meth:`ananke.graph.OperatorGraph.hold_k`), or ANK-1 would count such an
          output late and a source tuple could be labelled expired before it (A 3);
        - ``reads``: for how-provenance polynomials, the input columns that decide which
          rows form an output. Each output is then one derivation: the product of the
          variables of its provenance (:meth:`ananke.polynomial.PlanTracker.product`).
          None: the tracker records the shape as not covered."""
        out = self._next(df, "map", name, lag=to_timedelta(lag), ts=ts, single=False, hold=to_timedelta(hold),
                         **params)
        if self.query.poly is not None and reads is not None:
            self.query.poly.product(self.node, out.node, reads)
        return out

    def window(self, size: timedelta | str, slide: timedelta | str | None = None, keys: Sequence[str] = (),
               aggs: Sequence = (), ts_out: str | None = None, bounds: bool = False,
               name: str = "window") -> Provenanced:
        """An event-time Aggregate with window ``size`` and advance ``slide`` (tumbling when
        omitted), grouped by the columns named ``keys``, computing ``aggs`` (aliased Spark aggregate columns).

        The output has the keys, the aggregates, ``ts_out`` (default: the input's event-time
        column name) = ``window_time`` and, if ``bounds``, ``window_start`` / ``window_end``.
        """
        from pyspark.sql import functions as F

        size_td = to_timedelta(size)
        slide_td = to_timedelta(slide) if slide is not None else size_td
        if size_td <= ZERO or slide_td <= ZERO or slide_td > size_td:
            raise ProvenanceError(f"window {name!r}: need 0 < slide <= size, got size={size_td} slide={slide_td}")
        ts_out = ts_out or self.ts
        win = F.window(F.col(self.ts), spark_interval(size_td), spark_interval(slide_td))
        track, slots = None, ()
        if self.query.poly is not None:
            from ananke.poly_spark import agg_info

            track, slots = self.query.poly.window(self.node, agg_info(self.df, keys, aggs), keys,
                                                  size_td // timedelta(microseconds=1),
                                                  slide_td // timedelta(microseconds=1))
            slots = slots if self.single else ()
        if not self.query.enabled:
            prov, prov_out = [], []
        elif self.single:  # two flat lists of primitives in the state, one array of structs out
            prov = [F.collect_list(F.col(f"{PROV}.id")).alias(_PROV_IDS),
                    F.collect_list(F.col(f"{PROV}.ts")).alias(_PROV_TS)]
            # polynomials: each tuple's aggregated values, one more flat list per argument (NaN for NULL)
            prov += [F.collect_list(F.coalesce((F.col(a) if a in self.df.columns else F.expr(a)).cast("double"),
                                                 F.lit(float("nan")))).alias(f"{_PROV_V}{j}")
                     for j, a in enumerate(slots)]
            vtype = "".join(f",v{j}:double" for j in range(len(slots)))
            prov_out = [F.arrays_zip(_PROV_IDS, _PROV_TS, *[f"{_PROV_V}{j}" for j in range(len(slots))])
                        .cast(PROV_TYPE.replace(">>", f"{vtype}>>")).alias(PROV)]
        else:
            prov, prov_out = [F.flatten(F.collect_list(PROV)).alias(PROV)], [PROV]
        grouped = self.df.groupBy(win.alias("window"), *keys).agg(*aggs, *prov)
        agg_names = [c for c in grouped.columns if c not in ("window", PROV, _PROV_IDS, _PROV_TS, *keys)
                     and not c.startswith(_PROV_V)]
        extra = [F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")] if bounds else []
        df = grouped.select(*keys, *agg_names, F.window_time("window").alias(ts_out), *extra, *prov_out)
        out = self._next(df, "window", name, lag=size_td, ts=ts_out, single=False, size=size_td, slide=slide_td,
                         keys=tuple(str(k) for k in keys))
        if track is not None:
            self.query.poly.bind(out.node, track)
        lazy = self._digest_window(win, keys, aggs, agg_names, ts_out, extra)
        return out if lazy is None else Provenanced(out.query, out.df, out.ts, out.node, out.single, None, lazy)

    def _digest_window(self, win, keys: Sequence[str], aggs: Sequence, agg_names: list[str], ts_out: str,
                       extra: list) -> Lazy | None:
        """The window's digest plan (:mod:`ananke.digest`), when its input is one source's
        tuples with the keys and the event time unchanged, and the query asks for digests."""
        from pyspark.sql import functions as F

        o = self.origin
        if (not self.query.digest or not self.single or o is None or o.ts != self.ts
                or not all(isinstance(k, str) and k in o.columns for k in keys)):
            return None
        grouped = self.df.groupBy(win.alias("window"), *keys).agg(
            *aggs, F.count(F.lit(1)).alias(_DIGEST_N), F.bit_xor(F.col(f"{PROV}.id")).alias(_DIGEST_X))
        digest = F.struct(F.col(_DIGEST_N).alias("n"), F.col(_DIGEST_X).alias("x"),
                          F.col("window.start").alias("lo"), F.col("window.end").alias("hi"),
                          F.struct(*[F.col(k).alias(f"k{i}") for i, k in enumerate(keys)]).alias("k"))
        df = grouped.select(*keys, *agg_names, F.window_time("window").alias(ts_out), *extra, digest.alias(PROV))
        return Lazy(df, DigestSpec(o.stream, o.ts, tuple(keys)))

    def join(self, other: Provenanced, on: Sequence[str], lower: timedelta | str, upper: timedelta | str,
             ts_out: str = "ts", right_prefix: str = "r_", name: str = "join") -> Provenanced:
        """A stream-stream inner join on equal ``on`` keys and
        ``left.ts - lower <= right.ts <= left.ts + upper``.

        Output: left columns, right columns (``right_prefix`` added where names clash),
        ``ts_out`` = the later of the two event times, provenance = both sides' union. A left
        tuple is at most ``upper`` older than the output, a right one at most ``lower``.
        """
        from pyspark.sql import functions as F

        if other.query is not self.query:
            raise ProvenanceError(f"join {name!r}: both sides must come from the same ProvQuery")
        lo, up = to_timedelta(lower), to_timedelta(upper)
        if lo < ZERO or up < ZERO:
            raise ProvenanceError(f"join {name!r}: bounds must be >= 0, got lower={lo} upper={up}")
        left, right = self.df.alias("_l"), other.df.alias("_r")
        lts, rts = F.col(f"_l.{self.ts}"), F.col(f"_r.{other.ts}")
        cond = [F.col(f"_l.{k}") == F.col(f"_r.{k}") for k in on]
        cond += [rts >= lts - F.expr(f"INTERVAL {spark_interval(lo)}"), rts <= lts + F.expr(f"INTERVAL {spark_interval(up)}")]
        joined = left.join(right, cond, "inner")
        names = set(self.columns) | {ts_out}
        sel = [F.col(f"_l.{c}").alias(c) for c in self.columns if c != ts_out]
        sel += [F.col(f"_r.{c}").alias(f"{right_prefix}{c}" if c in names else c)
                for c in other.columns if c not in on]
        # the later of the two times; when a bound is zero that is one side's own column,
        # which keeps Spark's watermark on it (ANK-N needs one on the sink's time)
        later = rts if lo == ZERO else lts if up == ZERO else F.greatest(lts, rts)
        sel.append(later.alias(ts_out))
        if self.query.enabled:
            sel.append(F.concat(self._prov_array(self._plain(F.col(f"_l.{PROV}"))),
                                other._prov_array(other._plain(F.col(f"_r.{PROV}")))).alias(PROV))
        node = self.query.graph.add("join", name, [(self.node, up), (other.node, lo)], lower=lo, upper=up)
        if self.query.poly is not None:
            self.query.poly.join(self.node, other.node, node, [str(k) for k in on])
        return Provenanced(self.query, joined.select(*sel), ts_out, node)

    def sink(self, name: str) -> ProvSink:
        """Mark this stream as the instrumented Sink ``name`` (its U_K is then defined)."""
        from pyspark.sql import functions as F

        node = self.query.graph.add("sink", name, [(self.node, ZERO)])
        plan = self.query.poly.plan(self.node, name) if self.query.poly is not None else None
        if self.lazy is not None:
            sink = ProvSink(self.query, name, self.lazy.df, self.ts, node, self.lazy.spec, plan)
            self.query._sinks[name] = sink
            return sink
        df = self.df.withColumn(PROV, self._prov_array(F.col(PROV))) if self.single and self.query.enabled else self.df
        sink = ProvSink(self.query, name, df, self.ts, node, None, plan)
        self.query._sinks[name] = sink
        return sink


@dataclass(frozen=True)
class ProvSink:
    """An instrumented Sink: a streaming DataFrame of sink tuples with their provenance."""

    query: ProvQuery
    name: str
    df: object
    ts: str
    node: int
    #: set when the sink's provenance is a window digest, resolved at the sink (ananke.digest)
    digest: DigestSpec | None = None
    #: the sink tuples' polynomial shape (ananke.polynomial), when the query keeps polynomials
    poly: PolyPlan | None = None

    @property
    def payload_columns(self) -> list[str]:
        return [c for c in self.df.columns if c not in (PROV, self.ts)]

    @property
    def u_k(self) -> timedelta:
        return self.query.u_k(self.name)

    @property
    def hold(self) -> timedelta:
        """How far below Spark's watermark the sink's watermark lies (zero unless an
        operator upstream holds its outputs, :meth:`Provenanced.stateful`)."""
        return self.query.graph.hold_k(self.name)

    def with_ids(self):
        """The sink DataFrame plus ``_sink_id`` (deterministic: replays give equal ids)."""
        return self.df.withColumn("_sink_id", sink_id_col(self.name, self.ts, self.payload_columns))
