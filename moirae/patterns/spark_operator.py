"""A pattern as an instrumented Ananke operator over a Spark stream (T 4; A 2.3, A 4).

:func:`pattern_stream` takes an instrumented stream (:class:`ananke.query.Provenanced`)
and a compiled pattern and returns the instrumented stream of its matches:

- the input's rows are grouped by the PARTITION BY columns and run through the stateful
  processor of :mod:`moirae.patterns.spark_processor`
  (``transformWithStateInPandas``, event-time mode) on a stream, or through the same
  code once per key (``applyInPandas``) on a static frame (materialization, M 4.2);
- each row carries its row id (its source id, the tie-break of equal event times) and
  the source tuples it came from: two numbers when it comes from one (its id, unless the
  row id is it, and its time in microseconds), two arrays when from several (after a
  join or window), nothing when the input is not instrumented (the row is its own source
  tuple), and only the columns the patterns read, so the Python workers convert little
  per row; a match's provenance is the union over its bound rows (the ``PROV`` column,
  an array, as after a window);
- :func:`pattern_set_stream` runs several patterns with the same PARTITION BY and ORDER BY
  in one such operator (:mod:`moirae.patterns.spark_set`), each match tagged with its
  pattern; its lag and hold are the largest WITHIN, since the argument below holds for
  each pattern with its own WITHIN;
- the operator is recorded in the query's operator graph
  (:meth:`ananke.query.Provenanced.stateful`) with lag ``WITHIN`` and hold ``WITHIN``,
  and, for how-provenance polynomials, as a product: a match is one derivation of all
  its bound rows (removing any one of them removes the match, HUKA 4-5).

Why lag WITHIN and hold WITHIN (A 3-4). A match's rows lie in ``[first, first + WITHIN)``
and its event time is its last row's, so every source tuple is less than WITHIN older
than the match: the lag (U then follows, Theorem 4.1). When is a match emitted? Let W be
the watermark Spark ran micro-batch N-1 with. Spark drops input at or below W before the
processor in batch N, and a key's rows are fed only once the watermark passes them, so a
row first fed in batch N is later than W. A run still live after batch N-1 has its
WITHIN deadline ``first + WITHIN`` above W: a key's event-time timer sits at its earliest
deadline, Spark fires a timer at or below the watermark, and the run ends when the
watermark reaches its deadline. A match held behind an earlier live run (matches leave
in start order) has its first row after that run's, whose deadline is above W. So every
match emitted in batch N or later has ``first > W - WITHIN``: its event time (at least
``first``) may lie up to WITHIN below W, never more, which is the hold (a greedy match
whose end is still open waits for the key's next row or its deadline, so without the
hold ANK-1 would count it late and drop its provenance). The sink's watermark is then
``W - WITHIN`` (A Def. 2.1) and ANK-1 labels expired the source tuples older than
``W - 2 * WITHIN`` (plus any lag upstream of the pattern); every source tuple of a later
match is at or after its first row, later than ``W - WITHIN``.

Spark's stateful processor API needs the RocksDB state store. Spark records a query's
state store provider in its checkpoint at its first batch and restores it from there, so
:func:`rocksdb_start` sets the provider only around the start of a query that has no
checkpoint yet: other queries keep theirs, and a pattern query restarted from its
checkpoint gets RocksDB from it. The same start turns on RocksDB's changelog
checkpointing (a commit uploads the changed keys; snapshots are made in the background),
which a query may switch on or off across restarts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from datetime import timedelta

from ananke.ids import PROV, source_id_col
from ananke.query import PROV_TYPE, Provenanced
from moirae.patterns.compile import CompiledPattern
from moirae.patterns.errors import PatternError, PatternSyntaxError, UnboundedPattern
from moirae.patterns.expr import Col, Prev, Ref, walk
from moirae.patterns.spark_dead import DeadLetterWriter
from moirae.patterns.spark_processor import (
    IN_ID,
    IN_IDS,
    IN_TS,
    IN_TUS,
    PatternCore,
    PatternSet,
    batch_matches,
    processor,
)
from moirae.patterns.spark_schema import (
    PROV_IDS,
    PROV_TS,
    ROW_ID,
    measure_types,
    output_ddl,
    set_output_ddl,
    simple_types,
)

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: a micro-batch's commit writes the keys it changed, not a snapshot of the store
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_STARTING = {PROVIDER_KEY: ROCKSDB, CHANGELOG_KEY: "true"}
_ALL = "moirae_pat_all"  # the one key of a pattern without PARTITION BY
_starting = threading.Lock()


def within(cp: CompiledPattern) -> timedelta:
    """The pattern's WITHIN; a live pattern needs one (its state and U follow from it)."""
    if cp.within_ns is None:
        raise UnboundedPattern(f"pattern {cp.name!r}: a live pattern needs WITHIN (its state and its "
                               "provenance bound U follow from it)")
    return timedelta(microseconds=cp.within_ns // 1000)


def pattern_stream(inp: Provenanced, cp: CompiledPattern, *, eid: str = "eid", ts: str = "ts",
                   stream: str | None = None, payload: Sequence[str] | None = None,
                   dead: DeadLetterWriter | None = None) -> Provenanced:
    """The instrumented stream of ``cp``'s matches over ``inp`` (module docstring).

    ``stream`` and ``payload`` name the source ``inp`` reads (its rows' ids are then
    their source ids, with or without provenance columns); without them a row's id is
    its provenance id. ``dead``: where rows whose DEFINE fails go."""
    return _operator(inp, (cp,), None, eid=eid, ts=ts, stream=stream, payload=payload, dead=dead)


def pattern_set_stream(inp: Provenanced, cps: Sequence[CompiledPattern], *, tag: str = "pattern",
                       eid: str = "eid", ts: str = "ts", stream: str | None = None,
                       payload: Sequence[str] | None = None, dead: DeadLetterWriter | None = None) -> Provenanced:
    """The instrumented stream of the matches of every pattern of ``cps`` over ``inp``, run
    by one operator (:mod:`moirae.patterns.spark_set`): one shuffle and one state value per
    key for all of them. The patterns share their PARTITION BY and ORDER BY (else refused
    in one line naming both); each match is the one its pattern finds alone (same ``eid``,
    measures and provenance), its pattern named in column ``tag``, a measure another
    pattern lacks NULL. The operator's lag and hold are the largest WITHIN (the module
    docstring's argument holds for each pattern, hence for the largest)."""
    return _operator(inp, tuple(cps), tag, eid=eid, ts=ts, stream=stream, payload=payload, dead=dead)


def _operator(inp: Provenanced, cps: tuple[CompiledPattern, ...], tag: str | None, *, eid: str, ts: str,
              stream: str | None, payload: Sequence[str] | None, dead: DeadLetterWriter | None) -> Provenanced:
    from pyspark.sql import functions as F

    if not cps:
        raise PatternError("a pattern operator needs at least one pattern")
    lag = max(within(cp) for cp in cps)
    for cp in cps:
        if cp.order_by != inp.ts:
            raise PatternSyntaxError(f"pattern {cp.name!r}: ORDER BY {cp.order_by} is not the stream's event time "
                                     f"{inp.ts!r}")
    head = cps[0]
    df = inp.df
    types = simple_types(df.schema)
    has_prov = PROV in df.columns
    if stream is not None:
        rid = source_id_col(stream, inp.ts, list(payload) if payload is not None else
                            [c for c in inp.columns if c != inp.ts])
    elif has_prov and inp.single:
        rid = F.col(f"{PROV}.id")
    else:
        rid = F.xxhash64(*[F.col(c) for c in inp.columns])
    if has_prov and inp.single and _prov_time(df.schema):
        prov = [F.unix_micros(F.col(f"{PROV}.ts")).alias(IN_TUS)]
        if stream is not None:  # else the row id is the source id already
            prov.insert(0, F.col(f"{PROV}.id").alias(IN_ID))
    elif has_prov:
        prov = [(F.array(F.col(f"{PROV}.id")) if inp.single else F.transform(PROV, lambda p: p["id"])).alias(IN_IDS),
                (F.array(F.col(f"{PROV}.ts")) if inp.single else F.transform(PROV, lambda p: p["ts"])).alias(IN_TS)]
    else:
        prov = []  # each row is its own source tuple: its row id and event time
    keys = list(head.partition_by) or [_ALL]
    needed = list(dict.fromkeys([*head.partition_by, head.order_by, *(c for cp in cps for c in cp.columns_used)]))
    sel = df.select(*[F.col(c) for c in needed], rid.alias(ROW_ID), *prov,
                    *([] if head.partition_by else [F.lit(0).alias(_ALL)]))
    skip = {eid, ts, *([tag] if tag else [])}
    cores = [PatternCore(cp, eid, ts, tuple(m for m in measure_types(cp, types) if m not in {*skip, *cp.partition_by}),
                         dead) for cp in cps]
    ps = PatternSet(cores, tag)  # refuses patterns over other keys
    ddl = output_ddl(head, types, eid, ts) if tag is None else set_output_ddl(cps, types, eid, ts, tag)
    grouped = sel.groupBy(*keys)
    if df.isStreaming:
        out = grouped.transformWithStateInPandas(processor(ps), ddl, "Append", "EventTime")
    else:
        out = grouped.applyInPandas(batch_matches(ps), ddl)
    cols = [c for c in out.columns if c not in (PROV_IDS, PROV_TS)]
    if inp.query.enabled:
        tss = F.transform(F.col(PROV_TS), lambda us: F.timestamp_micros(us))
        out = out.select(*cols, F.arrays_zip(F.col(PROV_IDS).alias("id"), tss.alias("ts")).cast(PROV_TYPE).alias(PROV))
    else:
        out = out.select(*cols)
    name = f"pattern:{head.name}" if tag is None else f"patterns:{'+'.join(ps.names)}"
    read = tuple(sorted({c for cp in cps for c in reads(cp)}))
    return inp.stateful(out, lag, ts, name, hold=lag, reads=read, operator="pattern", within=lag)


def _prov_time(schema) -> bool:
    """Whether the time of a row's one source tuple (``PROV.ts``) is a timestamp, which
    then travels to the processor as microseconds."""
    for f in schema.fields:
        if f.name == PROV and hasattr(f.dataType, "fields"):
            return any(g.name == "ts" and g.dataType.simpleString() == "timestamp" for g in f.dataType.fields)
    return False


def reads(cp: CompiledPattern) -> tuple[str, ...]:
    """The input columns that decide which rows form a match: those its DEFINEs read,
    the PARTITION BY columns and the ORDER BY column (correcting one may change the
    matches; the MEASURES' other columns only change values)."""
    read = {n.name for e in cp.statement.defines.values() for n in walk(e)
            if isinstance(n, (Col, Prev, Ref)) and n.name}
    return tuple(sorted({*read, *cp.partition_by, cp.order_by}))


@contextlib.contextmanager
def rocksdb_start(spark):
    """Run a query's ``start`` with the RocksDB state store provider (and its changelog
    checkpointing) set on ``spark``, then put back what was there (see the module
    docstring). Starts are serialized."""
    with _starting:
        before = {k: spark.conf.get(k, None) for k in _STARTING}
        for k, v in _STARTING.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)


def with_rocksdb(spark, start):
    """``start`` (a flow's start method) wrapped in :func:`rocksdb_start`."""

    def wrapped(*args, **kwargs):
        with rocksdb_start(spark):
            return start(*args, **kwargs)

    return wrapped


def compile_live(name: str, sql: str, schema, ts_col: str | None = None) -> CompiledPattern:
    """``sql`` compiled against a source's Spark ``schema`` (a predicate naming a column
    the source lacks is refused with its position), checked to run live: it has a WITHIN,
    and its ORDER BY is the source's event time ``ts_col`` (when given)."""
    from moirae.patterns.compile import compile_pattern

    cp = compile_pattern(sql, name=name, columns=simple_types(schema), row_id=ROW_ID)
    within(cp)
    if ts_col is not None and cp.order_by != ts_col:
        raise PatternSyntaxError(f"pattern {name!r}: ORDER BY {cp.order_by} is not the source's event time {ts_col!r}")
    return cp


def pattern_function(cp: CompiledPattern, *, stream: str, payload: Sequence[str] | None,
                     eid: str = "eid", ts: str = "ts", dead: DeadLetterWriter | None = None):
    """The event-query function (one instrumented input, the source ``stream``) running
    ``cp``: what ``Engine.pattern_query`` and a monitor file's MATCH_RECOGNIZE deploy."""

    def pattern_query(inp: Provenanced) -> Provenanced:
        return pattern_stream(inp, cp, eid=eid, ts=ts, stream=stream, payload=payload, dead=dead)

    pattern_query.pattern = cp  # type: ignore[attr-defined] - what a monitor's checks read
    return pattern_query


def pattern_set_function(cps: Sequence[CompiledPattern], *, stream: str, payload: Sequence[str] | None,
                         tag: str = "pattern", eid: str = "eid", ts: str = "ts", dead: DeadLetterWriter | None = None):
    """:func:`pattern_function` of several patterns run by one operator
    (:func:`pattern_set_stream`): what ``Engine.pattern_queries`` deploys."""
    cps = tuple(cps)
    PatternSet([PatternCore(cp, eid, ts, ()) for cp in cps], tag)  # refuses them here, at deploy time

    def pattern_queries(inp: Provenanced) -> Provenanced:
        return pattern_set_stream(inp, cps, tag=tag, eid=eid, ts=ts, stream=stream, payload=payload, dead=dead)

    pattern_queries.patterns = cps  # type: ignore[attr-defined]
    return pattern_queries
