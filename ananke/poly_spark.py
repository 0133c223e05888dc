"""The Spark side of how-provenance polynomials (H 4 on :mod:`ananke.query`).

At plan-build time: :func:`agg_info` reads each window aggregate from Spark's analyzed
plan (function, argument, DISTINCT, FILTER: a Column's printed form hides DISTINCT), and
:func:`condition_sql` a filter's condition as the analyzer's SQL text, which
:class:`~ananke.poly_condition.Condition` evaluates later without Spark.

At the sink: :func:`sink_polys` turns a collected batch into one
:class:`~ananke.polynomial.Poly` per sink tuple. Its monomials are the provenance lists
ANK-1 gets (``degree`` ids per monomial; a window's list has one entry per contributing
tuple). A window over one source collected each tuple's values beside its id
(:mod:`ananke.query`: one more ``collect_list`` per aggregated argument in the window's
state, zipped into the provenance structs as fields ``v0..``); a window that kept only a
digest (:mod:`ananke.digest`) has no values in Spark, so they are read from the archive
together with the ids the digest resolved to (``values``, one read per batch: the
archive holds each source tuple once, under the same id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import numpy as np

from ananke.ids import PROV
from ananke.items import SinkTuple
from ananke.polynomial import Poly, PolyPlan

#: ``values(stream, columns, ids, lo, hi)``: the archived values of ``columns`` of the
#: tuples ``ids`` of ``stream`` with event time in ``[lo, hi)``, by id
ValueReader = Callable[[str, Sequence[str], Sequence[int], datetime, datetime], dict[int, tuple]]


def agg_info(df, keys: Sequence, aggs: Sequence) -> list[tuple[str, str, str, bool, bool, str | None]]:
    """``(name, function, argument SQL, distinct, filtered, plain column or None)`` of
    each aggregate column of ``aggs`` over ``df`` grouped by ``keys``. An aggregate
    whose argument's SQL text Spark cannot read back is reported with function
    ``unreadable`` (not covered); if the analyzer cannot be asked at all, every one is."""
    if not aggs:
        return []
    try:
        return _agg_info(df, keys, aggs)
    except Exception:  # noqa: BLE001 - never fail the query's build over its polynomial shape
        return [(f"_agg{i}", "unknown", "", False, False, None) for i in range(len(aggs))]


def _agg_info(df, keys: Sequence, aggs: Sequence) -> list[tuple[str, str, str, bool, bool, str | None]]:
    from pyspark.sql import functions as F

    analyzed = df.groupBy(*keys).agg(*aggs)._jdf.queryExecution().analyzed()
    exprs = analyzed.aggregateExpressions()
    out: list[tuple[str, str, str, bool, bool, str | None]] = []
    for i in range(exprs.size() - len(aggs), exprs.size()):
        named = exprs.apply(i)
        name = named.name()
        inner = named.child() if named.getClass().getSimpleName() == "Alias" else named
        if inner.getClass().getSimpleName() != "AggregateExpression":
            out.append((name, f"expression {inner.sql()}", "", False, False, None))
            continue
        fn = inner.aggregateFunction()
        children = fn.children()
        if children.size() != 1:
            out.append((name, fn.prettyName(), "", False, False, None))
            continue
        arg = children.apply(0)
        kind = arg.getClass().getSimpleName()
        column = arg.name() if kind == "AttributeReference" else None
        text = "1" if kind == "Literal" and fn.prettyName() == "count" and arg.sql() == "1" else arg.sql()
        if column is not None:
            text = column
        elif text != "1":
            try:
                df.select(F.expr(text))  # the window collects it by this text
            except Exception:  # noqa: BLE001 - any analysis error: the value is not collected
                out.append((name, "unreadable", text, False, False, None))
                continue
        out.append((name, fn.prettyName(), text, bool(inner.isDistinct()), bool(inner.filter().isDefined()), column))
    return out


def condition_sql(df, condition) -> str | None:
    """The analyzer's SQL text of ``df.filter(condition)``'s condition (None if Spark
    cannot print it)."""
    try:
        return str(df.filter(condition)._jdf.queryExecution().analyzed().condition().sql())
    except Exception:  # noqa: BLE001 - any analyzer shape without a printable condition
        return None


def sink_polys(plan: PolyPlan, table, rows: Sequence[tuple[SinkTuple, list[tuple[int, datetime]]]],
               values: ValueReader | None = None) -> list[tuple[int, datetime, Poly]]:
    """One ``(sink id, sink tuple time, Poly)`` per sink tuple of a collected batch.

    ``table`` is the batch as Arrow (its provenance column holds value fields ``v0..``
    when the window collected them), ``rows`` the same tuples with the provenance lists
    :func:`~ananke.spark_adapter.sink_rows` made of it (the digests already resolved),
    ``values`` reads a digest window's values from the archive."""
    if not rows:
        return []
    degree = plan.degree if plan.kind != "none" else 1
    k = len(plan.value_columns)
    if plan.kind != "window" or k == 0:
        return [(st.id, st.ts, Poly(np.fromiter((i for i, _ in prov), np.int64, len(prov)), None, degree))
                for st, prov in rows]
    prov = table.column(PROV).combine_chunks()
    fields = {prov.type.value_type.field(i).name for i in range(prov.type.value_type.num_fields)} \
        if hasattr(prov.type, "value_type") else set()
    if all(f"v{j}" in fields for j in range(k)):
        import pyarrow.compute as pc

        flat = pc.list_flatten(prov)
        vals = np.column_stack([flat.field(f"v{j}").to_numpy(zero_copy_only=False).astype(np.float64)
                                for j in range(k)])
        out, pos = [], 0
        for st, lst in rows:
            n = len(lst)
            out.append((st.id, st.ts, Poly(np.fromiter((i for i, _ in lst), np.int64, n), vals[pos:pos + n], degree)))
            pos += n
        return out
    return _archived(plan, rows, values)


def _archived(plan: PolyPlan, rows, values: ValueReader | None) -> list[tuple[int, datetime, Poly]]:
    """Digest windows: the values of the resolved ids, read from the archive (NaN where
    an id or a slot cannot be read: an expression argument, or no reader). The batch's
    ids are matched with the values read as arrays, at once."""
    k = len(plan.value_columns)
    slot_col: dict[int, str] = {a.slot: a.column for a in plan.aggs if a.slot is not None and a.column is not None}
    slots = sorted(slot_col)
    cols = [slot_col[j] for j in slots]
    lens = np.fromiter((len(lst) for _, lst in rows), np.int64, len(rows))
    ids = np.fromiter((i for _, lst in rows for i, _ in lst), np.int64, int(lens.sum()))
    vals = np.full((len(ids), k), np.nan)
    if values is not None and cols and len(ids):
        lo = min(ts for _, lst in rows for _, ts in lst)
        hi = max(ts for _, lst in rows for _, ts in lst)
        found = values(plan.streams[0], cols, np.unique(ids).tolist(), lo, hi + timedelta(microseconds=1))
        if found:
            keys = np.fromiter(found.keys(), np.int64, len(found))
            got = np.array(list(found.values()), dtype=np.float64).reshape(len(found), len(cols))  # None: NaN
            order = np.argsort(keys)
            keys, got = keys[order], got[order]
            pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
            hit = np.flatnonzero(keys[pos] == ids)
            vals[np.ix_(hit, slots)] = got[pos[hit]]
    ends = np.cumsum(lens)
    return [(st.id, st.ts, Poly(ids[e - n:e], vals[e - n:e], plan.degree))
            for (st, _), n, e in zip(rows, lens.tolist(), ends.tolist(), strict=True)]
