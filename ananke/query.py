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
only for the rows it emits. ``collect_list`` of the struct keeps one element object per
row instead: at 1,280,000 rows/s (1000 keys, 5-s windows, trigger 2 s) the event-query's
median batch took 2.4 s with it against 2.0 s with the two lists, and 0.45-0.64 s with no
provenance (plain Spark, same session, 2026-11-25). ``flatten(collect_list(array))``
(a window over windows or joins) builds an array of arrays first, and
``array_distinct`` on structs compares every pair of elements: at 1,600 rows per window
and key (320,000 rows/s, 1000 keys, 5-s windows) the second made one micro-batch take
23 s against 0.86 s for the flat list (bench/engine_jvm.py's event-query, measured
2026-11-24). An array may therefore name a source tuple twice (two identical tuples have
one id, a self-join meets a tuple from both sides); its consumers take the set:
:meth:`ananke.ank1.Ank1Logic.on_tuple` emits each edge once per sink tuple, ANK-N groups
its items by id.

The output event time of a window is Spark's ``window_time`` (the right boundary minus
one microsecond: within the window, which Theorem 4.1's footnote allows, and usable as the
event time of a chained window). A join's output time is the later of its two inputs.
With ``enabled=False`` the same query is built without any provenance (a baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from ananke.graph import OperatorGraph
from ananke.ids import PROV, prov_struct_col, sink_id_col, spark_interval, to_timedelta
from scheduler.errors import MoiraeError

ZERO = timedelta(0)
PROV_TYPE = "array<struct<id:bigint,ts:timestamp>>"
_PROV_IDS, _PROV_TS = f"{PROV}_ids", f"{PROV}_ts"  # a window's provenance in its state


class ProvenanceError(MoiraeError, ValueError):
    """A wrapper used in a way that would lose or corrupt provenance."""


class ProvQuery:
    """A set of instrumented queries sharing one operator graph (and hence one U)."""

    def __init__(self, enabled: bool = True) -> None:
        self.graph = OperatorGraph()
        self.enabled = enabled
        self._sinks: dict[str, ProvSink] = {}

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
        return Provenanced(self, df, ts, node, single=self.enabled)

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
class Provenanced:
    """An instrumented streaming DataFrame: the plan, its event-time column, its node."""

    query: ProvQuery
    df: object
    ts: str
    node: int
    #: the provenance column is one struct (a source tuple's own), not an array of them
    single: bool = False

    def _next(self, df, kind: str, name: str, lag: timedelta = ZERO, ts: str | None = None,
              single: bool | None = None, **params) -> Provenanced:
        node = self.query.graph.add(kind, name, [(self.node, lag)], **params)
        return Provenanced(self.query, df, ts or self.ts, node, self.single if single is None else single)

    def _prov_array(self, col):
        """This stream's provenance (the column ``col``) as an array."""
        from pyspark.sql import functions as F

        return F.array(col) if self.single else col

    @property
    def columns(self) -> list[str]:
        """The user-visible columns (without the provenance column)."""
        return [c for c in self.df.columns if c != PROV]

    def filter(self, condition, name: str = "filter") -> Provenanced:
        """Forward tuples for which ``condition`` holds; provenance unchanged."""
        return self._next(self.df.filter(condition), "filter", name)

    def select(self, *cols, name: str = "map") -> Provenanced:
        """A Map: project / compute columns. The event-time column is kept even if not named."""
        out = self.df.select(*cols).columns
        extra = [] if self.ts in out else [self.ts]
        prov = [PROV] if self.query.enabled else []
        return self._next(self.df.select(*cols, *extra, *prov), "map", name)

    def with_column(self, name_: str, expr, name: str = "map") -> Provenanced:
        """A Map adding (or replacing) one column."""
        if name_ in (PROV, self.ts):
            raise ProvenanceError(f"column {name_!r} is managed by the wrappers and cannot be replaced")
        return self._next(self.df.withColumn(name_, expr), "map", name)

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
        if not self.query.enabled:
            prov, prov_out = [], []
        elif self.single:  # two flat lists of primitives in the state, one array of structs out
            prov = [F.collect_list(F.col(f"{PROV}.id")).alias(_PROV_IDS),
                    F.collect_list(F.col(f"{PROV}.ts")).alias(_PROV_TS)]
            prov_out = [F.arrays_zip(_PROV_IDS, _PROV_TS).cast(PROV_TYPE).alias(PROV)]
        else:
            prov, prov_out = [F.flatten(F.collect_list(PROV)).alias(PROV)], [PROV]
        grouped = self.df.groupBy(win.alias("window"), *keys).agg(*aggs, *prov)
        agg_names = [c for c in grouped.columns if c not in ("window", PROV, _PROV_IDS, _PROV_TS, *keys)]
        extra = [F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")] if bounds else []
        df = grouped.select(*keys, *agg_names, F.window_time("window").alias(ts_out), *extra, *prov_out)
        return self._next(df, "window", name, lag=size_td, ts=ts_out, single=False, size=size_td, slide=slide_td)

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
            sel.append(F.concat(self._prov_array(F.col(f"_l.{PROV}")), other._prov_array(F.col(f"_r.{PROV}")))
                       .alias(PROV))
        node = self.query.graph.add("join", name, [(self.node, up), (other.node, lo)], lower=lo, upper=up)
        return Provenanced(self.query, joined.select(*sel), ts_out, node)

    def sink(self, name: str) -> ProvSink:
        """Mark this stream as the instrumented Sink ``name`` (its U_K is then defined)."""
        from pyspark.sql import functions as F

        node = self.query.graph.add("sink", name, [(self.node, ZERO)])
        df = self.df.withColumn(PROV, self._prov_array(F.col(PROV))) if self.single and self.query.enabled else self.df
        sink = ProvSink(self.query, name, df, self.ts, node)
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

    @property
    def payload_columns(self) -> list[str]:
        return [c for c in self.df.columns if c not in (PROV, self.ts)]

    @property
    def u_k(self) -> timedelta:
        return self.query.u_k(self.name)

    def with_ids(self):
        """The sink DataFrame plus ``_sink_id`` (deterministic: replays give equal ids)."""
        return self.df.withColumn("_sink_id", sink_id_col(self.name, self.ts, self.payload_columns))
