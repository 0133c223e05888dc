"""Helpers of the recall-operator tests.

``pandas_partials`` computes, for single-table templates whose aggregate arguments are
plain columns, what a chunk's partial query returns, so merging can be tested without
a database; ``pg_chunk_rows`` runs the real per-chunk SQL on PostgreSQL over one
chunk's table. ``truth`` is the one-shot aggregate over all rows, in pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import sqlglot
from sqlglot import exp

from recall.aggregate import to_py
from recall.split import DIALECT, SplitQuery, _bind_event_refs, parse_select


def _col(sql: str) -> str:
    """``h.x`` -> ``x``."""
    return sqlglot.parse_one(sql, dialect=DIALECT).name


def _arg(agg_sql: str) -> str | None:
    node = sqlglot.parse_one(agg_sql, dialect=DIALECT)
    arg = node.this
    if isinstance(arg, exp.Distinct):
        arg = arg.expressions[0]
    return None if isinstance(arg, exp.Star) else arg.name


def pandas_partials(spec: SplitQuery, df: pd.DataFrame) -> pd.DataFrame:
    """The partial rows ``spec.chunk_sql`` would return over ``df`` (no WHERE)."""
    gcols = [_col(g) for g in spec.group_sql]
    if gcols:
        groups = list(df.groupby(gcols, dropna=False, sort=False))
    else:
        groups = [((), df)]
    out = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        rec: dict[str, Any] = {f"g{i}": k for i, k in enumerate(key)}
        for agg in spec.aggregates:
            col = _arg(agg.sql)
            vals = g[col].dropna() if col else g.iloc[:, 0]
            p = agg.columns[0].split("_")[0]
            if agg.distinct:
                rec[f"{p}_set"] = sorted(set(vals.tolist())) or None
            elif agg.func == "count":
                rec[f"{p}_n"] = len(g) if col is None else len(vals)
            elif agg.func in ("sum", "avg"):
                rec[f"{p}_sum"] = vals.sum() if len(vals) else None
                rec[f"{p}_n"] = len(vals)
            elif agg.func in ("min", "max"):
                rec[f"{p}_{agg.func}"] = getattr(vals, agg.func)() if len(vals) else None
            else:
                n = len(vals)
                mean = float(vals.mean()) if n else None
                rec[f"{p}_n"], rec[f"{p}_mean"] = n, mean
                rec[f"{p}_m2"] = float(((vals - mean) ** 2).sum()) if n else None
        out.append(rec)
    return pd.DataFrame(out)


def truth_agg(func: str, vals: pd.Series, distinct: bool = False) -> Any:
    vals = vals.dropna()
    if distinct:
        vals = pd.Series(sorted(set(vals.tolist())), dtype="float64")
    n = len(vals)
    if func == "count":
        return n
    if n == 0:
        return None
    if func == "sum":
        return to_py(vals.sum())
    if func == "avg":
        return float(vals.mean())
    if func in ("min", "max"):
        return to_py(getattr(vals, func)())
    var = float(vals.var(ddof=0 if func.endswith("pop") else 1)) if (n > 1 or func.endswith("pop")) else None
    if var is None or math.isnan(var):
        return None
    return math.sqrt(var) if func.startswith("stddev") else var


def close(a: Any, b: Any, rel: float = 1e-7, abs_: float = 1e-7) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)
    return a == b


def rows_close(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


def bound_sql(sql: str, table_map: Mapping[str, str] | None = None, event_alias: str = "e") -> str:
    """``sql`` with ``:name``/``e.attr`` as psycopg2 ``%(name)s`` and tables renamed."""
    tree = _bind_event_refs(parse_select(sql), event_alias)
    if table_map:
        def swap(n):
            if isinstance(n, exp.Table) and n.name in table_map:
                return exp.Table(this=exp.to_identifier(table_map[n.name]), alias=n.args.get("alias"))
            return n

        tree = tree.transform(swap)
    return tree.sql(dialect=DIALECT)


def run_pg(conn, sql: str, params: Mapping[str, Any]) -> pd.DataFrame:
    with conn.cursor() as cur:
        cur.execute(sql, dict(params))
        cols = [d[0] for d in cur.description]
        return pd.DataFrame(cur.fetchall(), columns=cols)
