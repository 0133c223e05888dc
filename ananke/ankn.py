"""ANK-N: live forward provenance from Spark's own parallel operators (A 5.2, Algorithm 2).

:func:`ankn_items` turns a sink's streaming DataFrame (sink tuples + provenance) into a
streaming DataFrame of graph items, built only from native operators, so Spark runs it in
parallel like the query itself:

1. M_u (Algorithm 2) is an ``explode``: each sink tuple becomes one sink-vertex row and,
   per provenance entry, one edge row, one source-vertex candidate row and one
   source-label candidate row, each with an anchor a (a = τ_K for sink vertices and
   edges, a = τ_s for source vertices and labels).
2. D then FO, as :func:`delay` with ``anchor`` and ``later``: one event-time Aggregate
   whose windows have size 3U and advance U over the sink time τ_K, D's Filter keeping
   (before the Aggregate, so the state holds each item once) one window per row, grouped
   by window and item. For vertices and edges that window ends at ``delay(a) = (⌊a/U⌋ +
   2)·U``: D (figure 7) for sink vertices and edges. Every sink tuple a source s
   contributes to has τ_K in [τ_s, τ_s + U] (Theorem 4.1), which lies inside that one
   window, so all occurrences of s meet in one group and its vertex is emitted exactly
   once, stamped delay(τ_s), when the watermark shows no further edge of s can come: FO.
   A source's label rows meet the same way in the window ending U later, delay(τ_s) + U
   (>= delay(τ_K) of every edge of s): FO then D, as figure 6 routes the label.
3. M_L, a stateless ``explode``, turns each group into its items, stamped with its
   window's end: a sink vertex and its label at delay(τ_K) (= its edges' stamp, R-L), an
   edge at delay(τ_K), a source vertex at delay(τ_s), a source label at delay(τ_s) + U.
   The Aggregate emits a group when the watermark reaches its window's end, so no item
   leaves before the watermark reaches its stamp: a source's label never precedes one of
   its edges, as figure 6's final sorting Aggregate ensures.

Why D and FO share one Aggregate rather than figure 6's five stateful operators (D_1,
FO's two Aggregates and Join, D_2) and the sorting Aggregate on four branches:

- in one Spark streaming query every branch of a union re-runs the query upstream of it,
  with state of its own, so figure 6's branches would run the monitored query four times;
- each stateful operator costs every micro-batch a fixed amount of driver work whatever
  the rows (its plan and generated code, its closures serialized, the Hadoop settings
  broadcast to its state stores), which is what ANK-N's overhead is made of at these
  volumes;
- FO's two Aggregates and Join (figures 8-9) find a group's first arrival by counting;
  a source vertex's key carries that time, τ_s, so D's window anchored on it holds the
  whole group.

Spark's ``dropDuplicatesWithinWatermark`` keeps a key for the watermark delay (the
allowed lateness), not for U, so it cannot promise Forward-Once when U exceeds the
lateness. The sink vertices also go through the Aggregate: they are stamped delay(τ_K)
rather than τ_K. U = 0 (stateless queries) runs with U = 1 ms; the argument needs only
τ_K ∈ [τ_s, τ_s + U] (A 5.2, "Corner case").

Timestamps differ from ANK-1's, as A 6.2 says; the sets of vertices, edges and labels are
the same. The output columns are :data:`ITEM_COLUMNS`.

The paper's two auxiliary operators are here as it composes them from native operators,
each usable on its own, batch or streaming: :func:`delay` (D, figure 7: an Aggregate of
windows 2U advancing U keyed by the payload, a Filter keeping the copy delayed by more
than U, a Map restoring the payload) and :func:`forward_once` (FO, figures 8-9: two
Aggregates of tumbling 2U windows offset by U, counting each key's tuples, and a Join
under predicate (5.1)), for keys that do not carry their first time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta

from ananke.abc import GraphSink
from ananke.errors import AnankeError
from ananke.ids import PROV, from_micros, micros, sink_id_col, spark_interval
from ananke.items import Edge, GraphItem, Label, SinkVertex, SourceVertex
from ananke.query import ProvSink

ITEM_COLUMNS = ("kind", "vertex_kind", "id", "sink", "source_id", "sink_id", "tuple_us", "ts_us", "payload")
MIN_U = timedelta(milliseconds=1)


def _base(sink: ProvSink, u: timedelta):
    from pyspark.sql import functions as F

    df = sink.df
    if "spark.watermarkDelayMs" not in df.schema[sink.ts].metadata:
        lateness = max((dict(n.params).get("lateness", timedelta(0)) for n in sink.query.graph.nodes
                        if n.kind == "source"), default=timedelta(0))
        df = df.withWatermark(sink.ts, spark_interval(u + lateness))
    payload = sink.payload_columns
    return df.select(
        F.lit(sink.name).alias("sink_name"), sink_id_col(sink.name, sink.ts, payload).alias("sink_id"),
        F.col(sink.ts).alias("tk"), F.unix_micros(F.col(sink.ts)).alias("tk_us"),
        (F.to_json(F.struct(*payload)) if payload else F.lit("{}")).alias("payload"), F.col(PROV),
    )


def ankn_items(sinks: ProvSink | Sequence[ProvSink], U: timedelta | None = None):
    """The graph-item stream of ``sinks`` as one streaming DataFrame (columns ITEM_COLUMNS).

    Give every sink of a query set at once: sinks sharing source tuples must go through the
    same Forward-Once, or each would emit the shared source vertices (A 5.2 feeds ANK-N the
    union of all sink streams, B_Q). ``U`` defaults to the query's U (Remark 4.1). Each
    sink's event-time column needs a watermark. It has one after a window or straight from
    a source; a two-sided join's output time (the later of two inputs) has none, and is
    given one here with a delay of U plus the largest source lateness.
    """
    from pyspark.sql import functions as F

    sinks = [sinks] if isinstance(sinks, ProvSink) else list(sinks)
    if not sinks:
        raise AnankeError("ankn_items needs at least one sink")
    u = max(U if U is not None else sinks[0].query.U, MIN_U)
    base = _base(sinks[0], u)
    for other in sinks[1:]:
        base = base.unionByName(_base(other, u))
    null_long, null_str = F.lit(None).cast("long"), F.lit(None).cast("string")

    def item(kind, id_, src, snk, tuple_us, anchor, pay, name=null_str, later=0):
        return F.struct(F.lit(kind).alias("kind"), id_.alias("id"), src.alias("source_id"), snk.alias("sink_id"),
                        tuple_us.alias("tuple_us"), anchor.alias("anchor"), F.lit(later).alias("later"),
                        pay.alias("payload"), name.alias("sink_name"))

    sink_item = item("sink", F.col("sink_id"), null_long, null_long, F.col("tk_us"), F.col("tk_us"), F.col("payload"),
                     F.col("sink_name"))
    mu = base.select("tk", F.explode(F.concat(
        F.array(sink_item),
        F.transform(PROV, lambda p: item("edge", null_long, p["id"], F.col("sink_id"), null_long, F.col("tk_us"),
                                         null_str)),
        F.transform(PROV, lambda p: item("source", p["id"], null_long, null_long, F.unix_micros(p["ts"]),
                                         F.unix_micros(p["ts"]), null_str)),
        F.transform(PROV, lambda p: item("expired", p["id"], null_long, null_long, null_long,
                                         F.unix_micros(p["ts"]), null_str, later=1)),
    )).alias("i")).select("tk", "i.*")
    # D then FO: one Aggregate, keyed by the item (module docstring)
    grouped = delay(mu, "tk", u, anchor="anchor", later="later")
    end = F.unix_micros(F.col("tk"))

    def out(kind, vkind, id_=None, body=False):
        return F.struct(F.lit(kind).alias("kind"), F.lit(vkind).cast("string").alias("vertex_kind"),
                        (F.col("id") if id_ is None else id_).alias("id"),
                        (F.col("sink_name") if body else null_str).alias("sink"),
                        F.col("source_id"), F.col("sink_id"),
                        (F.col("tuple_us") if body else null_long).alias("tuple_us"),
                        end.cast("long").alias("ts_us"), (F.col("payload") if body else null_str).alias("payload"))

    expanded = (
        F.when(F.col("kind") == "sink", F.array(out("sink", "sink", body=True), out("label", "sink")))
        .when(F.col("kind") == "edge", F.array(out("edge", None, id_=null_long)))
        .when(F.col("kind") == "source", F.array(out("source", "source", body=True)))
        .otherwise(F.array(out("label", "source")))
    )
    return grouped.select(F.explode(expanded).alias("o")).select(*[F.col(f"o.{c}").alias(c) for c in ITEM_COLUMNS])


def delay(df, ts: str, U: timedelta, anchor: str | None = None, later: str | None = None):
    """The paper's Delay operator D as figure 7 composes it (A 5.2): every input tuple once,
    payload unchanged, stamped ``delay(τ) = (⌊τ/U⌋ + 2)·U``, so ``U < delay(τ) - τ <= 2U``.

    - A: an Aggregate over event time ``ts`` with windows of size 2U advancing U, keyed by
      the payload (every column but ``ts``) and the input's own time τ_orig, so a tuple
      lands in exactly two windows;
    - F: keeps the window whose end lies more than U after τ_orig (exactly one of the two,
      the one starting at ⌊τ_orig/U⌋·U). F reads only the window and τ_orig, so it runs
      before A: the state holds each tuple once, and the result is figure 7's;
    - M: restores the payload, stamped with that window's end.

    With ``anchor`` (a column of microseconds since the epoch, part of the payload) F keeps
    the window that starts at ⌊anchor/U⌋·U instead, and A is keyed by the payload alone:
    tuples with equal payloads whose ``ts`` lie in ``[anchor, anchor + U]`` meet in that one
    window and leave one output, stamped ``delay(anchor)``. That is Forward Once for a key
    that carries its own first time, as a source vertex does (its id and τ_s; every sink
    tuple naming it has τ_K in [τ_s, τ_s + U], Theorem 4.1): D then FO in one Aggregate.
    Without ``anchor`` the payload must be unique per tuple (the paper's premise).

    With ``later`` as well (a payload column of 0 or 1) a tuple is held U longer where it
    is 1: stamped ``delay(anchor) + later·U``. The windows are then 3U long, still
    advancing U, and F keeps the one starting at ``(⌊anchor/U⌋ - 1 + later)·U``; it ends
    at that stamp and, for ``ts`` in ``[anchor, anchor + U]``, holds ``ts``. ANK-N holds a
    source's "expired" label this way until no edge naming the source can still come (R-L).

    The payload must be groupable (no map columns). On a streaming ``df`` the column ``ts``
    needs a watermark, and a tuple leaves when the watermark passes its window's end.

    >>> from datetime import datetime, UTC
    >>> tau, U = datetime(2024, 1, 1, 0, 0, 25, tzinfo=UTC), timedelta(seconds=10)
    >>> delay_of(tau, U).second, U < delay_of(tau, U) - tau <= 2 * U
    (40, True)
    """
    from pyspark.sql import functions as F

    u_us = _micros(U)
    payload = [c for c in df.columns if c != ts]
    for name, col in (("anchor", anchor), ("later", later)):
        if col is not None and col not in payload:
            raise AnankeError(f"delay: {name} column {col!r} is not among the payload columns {payload}")
    if later is not None and anchor is None:
        raise AnankeError("delay: later needs an anchor")
    # τ_orig as a number: a second timestamp key would carry the watermark's marker too,
    # and a streaming Aggregate takes one event-time column
    orig = F.col(anchor) if anchor is not None else F.unix_micros(F.col(ts))
    keys = [] if anchor is not None else [orig.alias("_orig")]
    first = F.floor(orig / F.lit(u_us))  # ⌊τ/U⌋
    if later is None:
        size, start = 2 * U, first
    else:
        size, start = 3 * U, first - F.lit(1) + F.col(later)
    f = (df.select(F.window(ts, spark_interval(size), spark_interval(U)).alias("_w"), *keys, *payload)
         .filter(F.unix_micros(F.col("_w.start")) == start * F.lit(u_us)))
    # a count, so Spark aggregates by hashing (a first() of a string would sort both sides)
    a = f.groupBy("_w", *(["_orig"] if keys else []), *payload).agg(F.count(F.lit(1)).alias("_n"))
    return a.select(*payload, F.col("_w.end").alias(ts))


def forward_once(df, ts: str, key: Sequence[str], U: timedelta):
    """The paper's Forward Once operator FO as figure 8 composes it (A 5.2, fig. 9): of a
    group of tuples t_1..t_n with the same ``key`` and t_n.τ - t_1.τ < U, exactly one tuple
    is output, with t_n's payload (every column but ``ts`` and ``key``), stamped
    ``delay(t_1.τ)``.

    - A_1, A_2: Aggregates with tumbling windows of size 2U, A_2's offset by U, keyed by
      ``key``, each emitting its window's end, the count c of the group's tuples in it and
      the latest tuple's payload;
    - J: a Join of A_1's and A_2's outputs on ``key`` within a window of size 2U advancing
      U (so within U of each other: their ends alternate U apart) under the predicate
      (5.1) ``(r.τ <= s.τ ∧ r.c <= s.c) ∨ (s.τ <= r.τ ∧ s.c <= r.c)``; the later of the
      pair is forwarded. A group inside one window of each Aggregate meets once (equal
      counts); a group split by one Aggregate's boundary meets the other's one window
      twice, and only the earlier meeting satisfies (5.1).

    Source tuples named again by later sink tuples are never further than U apart
    (Remark 4.1), so FO over source vertices emits each exactly once (R-V)."""
    from pyspark.sql import functions as F

    key = list(key)
    payload = [c for c in df.columns if c != ts and c not in key]
    u_us, two_u = _micros(U), spark_interval(2 * U)

    def aggregate(start: str | None, side: str):
        w = F.window(ts, two_u, two_u, start) if start else F.window(ts, two_u)
        latest = F.max_by(F.struct(*payload), F.col(ts)) if payload else F.lit(None)
        return (df.groupBy(w.alias("_w"), *key).agg(F.count(F.lit(1)).alias("_c"), latest.alias("_p"))
                .select(*[F.col(k).alias(f"{side}{k}") for k in key], F.unix_micros(F.col("_w.end")).alias(f"{side}_t"),
                        F.col("_c").alias(f"{side}_c"), F.col("_p").alias(f"{side}_p")))

    r, s = aggregate(None, "r"), aggregate(spark_interval(U), "s")
    same = [F.col(f"r{k}") == F.col(f"s{k}") for k in key]
    near = F.abs(F.col("r_t") - F.col("s_t")) <= F.lit(u_us)
    fo = (((F.col("r_t") <= F.col("s_t")) & (F.col("r_c") <= F.col("s_c")))
          | ((F.col("s_t") <= F.col("r_t")) & (F.col("s_c") <= F.col("r_c"))))
    cond = same[0]
    for c in [*same[1:], near, fo]:
        cond = cond & c
    j = r.join(s, cond)
    later = F.col("r_t") > F.col("s_t")
    body = F.when(later, F.col("r_p")).otherwise(F.col("s_p"))
    return j.select(*[F.col(f"r{k}").alias(k) for k in key], *[body[c].alias(c) for c in payload],
                    F.timestamp_micros(F.greatest(F.col("r_t"), F.col("s_t"))).alias(ts))


def delay_of(tau, U: timedelta):
    """``delay(τ) = (⌊τ/U⌋ + 2)·U`` (A 5.2) of an aware datetime."""
    u = _micros(U)
    return from_micros((micros(tau) // u + 2) * u)


def _micros(U: timedelta) -> int:
    return int(U / timedelta(microseconds=1))


def rows_to_items(rows: Sequence) -> list[GraphItem]:
    """Graph items from collected ITEM_COLUMNS rows (Rows, or dicts from Arrow)."""
    import json

    out: list[GraphItem] = []
    for r in rows:
        kind, ts = r["kind"], from_micros(r["ts_us"])
        if kind == "sink":
            out.append(SinkVertex(r["id"], r["sink"], from_micros(r["tuple_us"]), ts, json.loads(r["payload"] or "{}")))
        elif kind == "source":
            out.append(SourceVertex(r["id"], from_micros(r["tuple_us"]), ts))
        elif kind == "edge":
            out.append(Edge(r["source_id"], r["sink_id"], ts))
        else:
            out.append(Label(r["id"], r["vertex_kind"], ts))
    return out


class AnkNSparkSink:
    """Run ANK-N for a set of sinks (one streaming query) and hand each micro-batch's items
    to a GraphSink."""

    def __init__(self, sinks: ProvSink | Sequence[ProvSink], emit: GraphSink, U: timedelta | None = None) -> None:
        self.sinks = [sinks] if isinstance(sinks, ProvSink) else list(sinks)
        self.emit = emit
        self.df = ankn_items(self.sinks, U)
        self.last_batch = -1
        self.items = 0

    def __call__(self, batch_df, batch_id: int) -> None:
        if batch_id <= self.last_batch:
            return
        items = rows_to_items(batch_df.toArrow().to_pylist())
        if items:
            self.emit(items)
        self.items += len(items)
        self.last_batch = batch_id

    def start(self, checkpoint: str | None = None, trigger: dict | None = None, query_name: str | None = None,
              conf: dict[str, str] | None = None):
        """Start the items' streaming query with this object as foreachBatch, under
        :data:`QUERY_CONF` plus ``conf`` (SQL settings for this query alone)."""
        writer = self.df.writeStream.outputMode("append").foreachBatch(self)
        if checkpoint:
            writer = writer.option("checkpointLocation", checkpoint)
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        return start_with_conf(self.df.sparkSession, writer, {**QUERY_CONF, **(conf or {})})


QUERY_CONF = {"spark.sql.subexpressionElimination.enabled": "false"}
"""SQL settings ANK-N's streaming query runs with.

Spark 4.0's code generator fails on this plan when common subexpressions are eliminated:
the Filter of a sliding window's Expand, fed by a Generate (the ``explode`` of M_u),
splits its shared subexpressions into methods whose parameter is named after the
Expand's row slot, ``InternalRow expand_mutableStateArray_0[0]``, which is not Java. Spark
then falls back to interpreting that stage, in every task (slower), and logs the failure
with a long stack trace each micro-batch (seen on Linear Road's accident sink). Without
the elimination the stage compiles; the graph items are the same either way."""

_CONF_LOCK = threading.Lock()


def start_with_conf(spark, writer, conf: dict[str, str]):
    """``writer.start()`` with ``conf`` set for that streaming query alone.

    A streaming query clones its session's SQL settings when it starts (Spark's
    ``StreamExecution.sparkSessionForStream``), so settings changed just around ``start``
    stay with the query and the session gets its own back. The lock keeps two such starts
    from mixing their settings."""
    with _CONF_LOCK:
        before = {k: spark.conf.get(k, None) for k in conf}
        for k, v in conf.items():
            spark.conf.set(k, v)
        try:
            return writer.start()
        finally:
            for k, v in before.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)
