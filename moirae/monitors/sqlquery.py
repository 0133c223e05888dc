"""Spark SQL event-queries compiled onto the instrumented operators (M 3.1, A 2.3, A 4).

A monitor's ``event_query.sql`` is one Spark SQL SELECT over its declared sources. It is
not run as SQL: it is taken apart (sqlglot) and rebuilt, step by step, with the
provenance wrappers a Python event-query uses (:class:`ananke.query.Provenanced`):

- ``FROM a [JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL x AND a.ts + INTERVAL y]``:
  one ``source`` per table, at most one stream-stream join
  (:meth:`~ananke.query.Provenanced.join`, ``lower = x``, ``upper = y``; its event time is
  the later of the two, written ``greatest(a.ts, b.ts)`` afterwards);
- ``WHERE``: the conjuncts over one table are one ``filter`` on that table before the
  join, the others one ``filter`` after it;
- ``GROUP BY window(ts, 'size'[, 'slide']), keys...``: one
  :meth:`~ananke.query.Provenanced.window` computing every aggregate of the SELECT and
  HAVING lists; ``window_time(window)`` is the window's event time (select it as the
  event-query's ``ts``), ``window.start`` / ``window.end`` its bounds;
- ``HAVING``: a ``filter`` on the window's output;
- the SELECT list: one ``select`` (map).

So a SQL event-query and the Python function written with the same operators build the
same plan, the same operator graph (hence the same U, A 4) and the same provenance; the
engine applies the compiled function live and, unchanged, to archived chunks
(materialization, M 4.2). Anything else (subqueries, ORDER BY, LIMIT, DISTINCT, OVER,
outer joins, several joins, a GROUP BY without an event-time window, ...) is refused with
the construct and its line in the SQL.

>>> q = compile_sql("SELECT sid, window_time(window) AS ts, avg(bw) AS avg_bw, concat_ws(':', sid) AS eid "
...                 "FROM metrics GROUP BY window(ts, '5 minutes'), sid HAVING avg(bw) > 600",
...                 {"metrics": ("sid", "bw", "ts")}, {"metrics": "ts"})
>>> q.inputs, q.windowed, q.output
(('metrics',), True, ('sid', 'ts', 'avg_bw', 'eid'))
>>> compile_sql("SELECT * FROM metrics ORDER BY ts", {"metrics": ("ts",)}, {"metrics": "ts"})
Traceback (most recent call last):
...
moirae.monitors.errors.UnsupportedSql: <monitor>:1: ORDER BY is not supported in an event-query (a stream has no order to keep)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from moirae.base.durations import DurationError, parse_duration
from moirae.monitors.errors import UnsupportedSql

DIALECT = "spark"
WIN = "moirae_window"  # the token ``window`` is masked as this identifier for sqlglot
WINDOW_START, WINDOW_END = "window_start", "window_end"
_AGG_PREFIX = "_moirae_agg"


@dataclass(frozen=True)
class CompiledQuery:
    """A SQL event-query as a function over instrumented inputs."""

    sql: str
    inputs: tuple[str, ...]
    fn: Callable = field(repr=False)
    windowed: bool
    output: tuple[str, ...]
    #: the Spark SQL text a plain Spark run of the query takes (``window`` restored)
    spark_sql: str = field(repr=False, default="")


def _line_of(sql: str, needle: str) -> int:
    """The 1-based line of ``sql`` where ``needle`` first appears (case-insensitive), else 1."""
    pos = sql.lower().find(needle.lower()) if needle else -1
    return 1 if pos < 0 else sql.count("\n", 0, pos) + 1


def _refuse(sql: str, message: str, needle: str = "") -> UnsupportedSql:
    return UnsupportedSql(message, sql_line=_line_of(sql, needle))


def _mask_window(sql: str) -> str:
    """``window`` is a keyword to sqlglot (the WINDOW clause) and a function to Spark:
    rename the token so sqlglot reads it as a name."""
    try:
        tokens = Spark().tokenize(sql)
    except TokenError as exc:
        raise UnsupportedSql(f"bad SQL: {exc}", sql_line=1) from None
    out = sql
    for t in reversed(tokens):
        if t.token_type == TokenType.WINDOW:
            out = out[:t.start] + WIN + out[t.end + 1:]
    return out


def _spark(node: exp.Expression) -> str:
    return re.sub(WIN, "window", node.sql(dialect=DIALECT), flags=re.IGNORECASE)


def _duration(sql: str, node: exp.Expression, what: str) -> timedelta:
    if isinstance(node, exp.Interval):
        text = f"{node.this.name if isinstance(node.this, exp.Literal) else node.this.sql()} " \
               f"{node.unit.name if node.unit is not None else ''}"
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.this
    else:
        raise _refuse(sql, f"{what} must be a literal duration ('5 minutes' or INTERVAL 5 MINUTES), "
                           f"got {_spark(node)}", _spark(node).split("(")[0])
    try:
        return parse_duration(text.strip().lower().replace("interval", "").strip())
    except DurationError as exc:
        raise _refuse(sql, f"{what}: {exc}", node.sql()) from None


class _Compiler:
    def __init__(self, sql: str, columns: Mapping[str, Sequence[str]], source_ts: Mapping[str, str],
                 ts: str, eid: str) -> None:
        self.sql, self.columns, self.source_ts, self.ts, self.eid = sql, columns, source_ts, ts, eid
        try:
            trees = sqlglot.parse(_mask_window(sql), read=DIALECT)
        except ParseError as exc:
            err = exc.errors[0] if exc.errors else {}
            raise UnsupportedSql(f"bad SQL: {err.get('description') or exc}", sql_line=err.get("line") or 1) from None
        trees = [t for t in trees if t is not None]
        if len(trees) != 1:
            raise _refuse(sql, f"an event-query is one SELECT, got {len(trees)} statements", ";")
        self.tree = trees[0]

    # -- structure -------------------------------------------------------------------

    def check_shape(self) -> None:
        t, sql = self.tree, self.sql
        if not isinstance(t, exp.Select):
            raise _refuse(sql, f"an event-query is one SELECT, got {t.key.upper()}", t.key)
        for key, what, needle in (("with", "WITH (common table expressions)", "with"),
                                  ("order", "ORDER BY", "order"), ("limit", "LIMIT", "limit"),
                                  ("offset", "OFFSET", "offset"), ("distinct", "SELECT DISTINCT", "distinct"),
                                  ("qualify", "QUALIFY", "qualify"), ("windows", "a WINDOW clause", WIN),
                                  ("laterals", "LATERAL VIEW", "lateral"), ("sort", "SORT BY", "sort"),
                                  ("cluster", "CLUSTER BY", "cluster"), ("distribute", "DISTRIBUTE BY", "distribute")):
            if t.args.get(key):
                why = " (a stream has no order to keep)" if key in ("order", "sort") else ""
                raise _refuse(sql, f"{what} is not supported in an event-query{why}", needle)
        for _node in t.find_all(exp.Subquery, exp.Union, exp.Intersect, exp.Except):
            raise _refuse(sql, "subqueries and set operations are not supported in an event-query", "select",)
        nested = [s for s in t.find_all(exp.Select) if s is not t]
        if nested:
            raise _refuse(sql, "subqueries are not supported in an event-query", _spark(nested[0])[:12])
        for _node in t.find_all(exp.Window):
            raise _refuse(sql, "window functions (OVER) are not supported in an event-query; "
                               "use GROUP BY window(ts, ...)", "over")
        for item in t.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
                raise _refuse(sql, "SELECT * is not supported in an event-query: name the columns", "*")

    def tables(self) -> None:
        t, sql = self.tree, self.sql
        frm = t.args.get("from") or t.args.get("from_")
        if frm is None:
            raise _refuse(sql, "an event-query needs FROM <source>", "select")
        self.alias: dict[str, str] = {}
        self.order: list[str] = []
        joins = t.args.get("joins") or []
        if len(joins) > 1:
            raise _refuse(sql, "at most one JOIN per event-query in this build", "join")
        for node in [frm.this, *(j.this for j in joins)]:
            if not isinstance(node, exp.Table) or node.args.get("db") or node.args.get("catalog"):
                raise _refuse(sql, f"FROM and JOIN name declared sources, got {_spark(node)}", _spark(node)[:20])
            name = node.name
            if name not in self.columns:
                known = ", ".join(sorted(self.columns)) or "none"
                raise _refuse(sql, f"unknown stream {name!r} (declared sources: {known})", name)
            if name in self.order:
                raise _refuse(sql, f"stream {name!r} is read twice (self-joins are not supported)", name)
            self.order.append(name)
            self.alias[node.alias_or_name] = name
            self.alias[name] = name
        self.join = joins[0] if joins else None
        if self.join is not None:
            j = self.join
            if (j.side or "").upper() or (j.kind or "").upper() not in ("", "INNER"):
                raise _refuse(sql, f"only inner joins are supported, got {(j.side or j.kind).upper()} JOIN",
                              (j.side or j.kind))
            if j.args.get("using") or j.args.get("on") is None:
                raise _refuse(sql, "a JOIN needs ON with key equalities and time bounds", "join")

    def table_of(self, col: exp.Column) -> str:
        """The source a column reference reads."""
        sql = self.sql
        if col.table:
            if col.table not in self.alias:
                raise _refuse(sql, f"unknown table or alias {col.table!r} in {_spark(col)}", col.table)
            name = self.alias[col.table]
            if col.name not in self.columns[name]:
                raise _refuse(sql, f"stream {name!r} has no column {col.name!r} "
                                   f"(columns: {', '.join(self.columns[name])})", col.name)
            return name
        owners = [n for n in self.order if col.name in self.columns[n]]
        if not owners:
            raise _refuse(sql, f"unknown column {col.name!r} (columns: "
                               + "; ".join(f"{n}: {', '.join(self.columns[n])}" for n in self.order) + ")",
                          col.name)
        if len(owners) > 1:
            raise _refuse(sql, f"column {col.name!r} is ambiguous: qualify it ({' or '.join(owners)})", col.name)
        return owners[0]

    # -- join ------------------------------------------------------------------------

    def join_plan(self) -> None:
        """Keys, bounds and the output names after the join."""
        self.keys: list[str] = []
        self.names: dict[tuple[str, str], str] = {}
        if self.join is None:
            (only,) = self.order
            self.names = {(only, c): c for c in self.columns[only]}
            return
        sql, (left, right) = self.sql, self.order
        lts, rts = self.source_ts[left], self.source_ts[right]
        lower = upper = None
        for c in _conjuncts(self.join.args["on"]):
            if isinstance(c, exp.EQ) and all(isinstance(s, exp.Column) for s in (c.this, c.expression)):
                a, b = c.this, c.expression
                ta, tb = self.table_of(a), self.table_of(b)
                if {ta, tb} == {left, right} and a.name == b.name and a.name not in (lts, rts):
                    self.keys.append(a.name)
                    continue
                raise _refuse(sql, f"a join key must be the same column on both sides, got {_spark(c)}", a.name)
            bounds = self._time_bound(c, left, right, lts, rts)
            if bounds is None:
                raise _refuse(sql, f"a JOIN's ON holds key equalities and time bounds only, got {_spark(c)}",
                              _spark(c)[:15])
            lo, up = bounds
            lower = lo if lo is not None else lower
            upper = up if up is not None else upper
        if not self.keys:
            raise _refuse(sql, "a stream-stream JOIN needs at least one key equality (a.k = b.k)", "join")
        if lower is None or upper is None:
            raise _refuse(sql, f"a stream-stream JOIN needs both time bounds, e.g. {right}.{rts} BETWEEN "
                               f"{left}.{lts} - INTERVAL 1 MINUTE AND {left}.{lts} + INTERVAL 1 MINUTE", "join")
        self.lower, self.upper = lower, upper
        lcols = [c for c in self.columns[left] if c != self.ts]
        taken = set(lcols) | {self.ts}
        self.names = {(left, c): c for c in lcols}
        for c in self.columns[right]:
            self.names[(right, c)] = c if c in self.keys else f"r_{c}" if c in taken else c

    def _time_bound(self, c: exp.Expression, left: str, right: str, lts: str, rts: str):
        """``(lower, upper)`` (one may be None) of ``right.ts`` against ``left.ts``, or None."""

        def side(node) -> tuple[str, timedelta] | None:  # (table, +offset) of ts [+|- INTERVAL]
            sign, off = 1, timedelta(0)
            if isinstance(node, (exp.Add, exp.Sub)):
                sign = 1 if isinstance(node, exp.Add) else -1
                off = _duration(self.sql, node.expression, "a join's time bound")
                node = node.this
            if isinstance(node, exp.Column):
                t = self.table_of(node)
                if node.name == self.source_ts[t]:
                    return t, sign * off
            return None

        if isinstance(c, exp.Between):
            x, lo, hi = side(c.this), side(c.args["low"]), side(c.args["high"])
            if None in (x, lo, hi) or x[1] != timedelta(0) or lo[0] != hi[0] or x[0] == lo[0]:
                return None
            if x[0] == right:  # right.ts in [left.ts + lo, left.ts + hi]
                return -lo[1], hi[1]
            return hi[1], -lo[1]  # left.ts in [right.ts + lo, right.ts + hi]
        if isinstance(c, (exp.GTE, exp.LTE)):
            a, b = side(c.this), side(c.expression)
            if a is None or b is None or a[0] == b[0]:
                return None
            ge = isinstance(c, exp.GTE)
            if a[0] == left:  # write it as right.ts (op) left.ts + off
                a, b, ge = b, a, not ge
            off = b[1] - a[1]
            return (-off, None) if ge else (None, off)
        if isinstance(c, (exp.GT, exp.LT)):
            raise _refuse(self.sql, f"a join's time bound is inclusive: write >= or <=, got {_spark(c)}",
                          _spark(c)[:15])
        return None

    # -- expressions -----------------------------------------------------------------

    def mapped(self, node: exp.Expression, stage: str, aggs: Mapping[str, str] | None = None) -> str:
        """``node`` as Spark SQL over the stream at ``stage``: ``pre:<table>`` (a source
        before the join), ``post`` (after the join, before a window) or ``window`` (after
        the window: keys, aggregates, window time and bounds)."""
        sql = self.sql
        node = node.copy()

        def swap(n: exp.Expression) -> exp.Expression:
            if aggs is not None and isinstance(n, exp.AggFunc):
                return exp.column(aggs[_spark(n)])
            if isinstance(n, exp.Anonymous) and n.name.lower() == "window_time":
                if stage != "window":
                    raise _refuse(sql, "window_time(window) is only defined in a windowed query", "window_time")
                return exp.column(self.ts)
            if isinstance(n, exp.Greatest) and stage in ("post", "window"):
                cols = [n.this, *n.expressions]
                if (len(cols) == 2 and all(isinstance(x, exp.Column) for x in cols)
                        and {self.table_of(x) for x in cols} == set(self.order)
                        and all(x.name == self.source_ts[self.table_of(x)] for x in cols)):
                    if stage == "window":
                        raise _refuse(sql, "after a window, its event time is window_time(window)", "greatest")
                    return exp.column(self.ts)
            if isinstance(n, exp.Column):
                if n.table == WIN or n.name == WIN:
                    if stage != "window" or n.name not in ("start", "end") or n.table != WIN:
                        raise _refuse(sql, "the window is read as window_time(window), window.start "
                                           "or window.end", "window")
                    self.bounds = True
                    return exp.column(WINDOW_START if n.name == "start" else WINDOW_END)
                t = self.table_of(n)
                if stage.startswith("pre:"):
                    return exp.column(n.name)
                if self.join is not None and n.name == self.source_ts[t]:
                    raise _refuse(sql, f"after a join the event time is greatest({self.order[0]}."
                                       f"{self.source_ts[self.order[0]]}, {self.order[1]}."
                                       f"{self.source_ts[self.order[1]]}), not {_spark(n)}", _spark(n))
                name = self.names[(t, n.name)]
                if stage == "window" and name not in self.group_keys:
                    raise _refuse(sql, f"column {_spark(n)} is neither a GROUP BY key nor inside an aggregate",
                                  n.name)
                return exp.column(name)
            return n

        return _spark(node.transform(swap))

    # -- the plan --------------------------------------------------------------------

    def compile(self) -> CompiledQuery:
        self.check_shape()
        self.tables()
        self.join_plan()
        sql, t = self.sql, self.tree
        self.bounds = False
        self.group_keys: list[str] = []
        pre: dict[str, list[str]] = {n: [] for n in self.order}
        post: list[str] = []
        where = t.args.get("where")
        for c in _conjuncts(where.this) if where is not None else []:
            if any(True for _ in c.find_all(exp.AggFunc)):
                raise _refuse(sql, f"aggregates belong in HAVING, not WHERE: {_spark(c)}", "where")
            owners = {self.table_of(col) for col in c.find_all(exp.Column) if col.table != WIN and col.name != WIN}
            if len(owners) == 1:
                (o,) = owners
                pre[o].append(self.mapped(c, f"pre:{o}"))
            else:
                post.append(self.mapped(c, "post"))
        group = t.args.get("group")
        window = None
        aggs: dict[str, str] = {}
        agg_exprs: list[tuple[str, str]] = []
        if group is not None:
            for g in group.expressions:
                if isinstance(g, exp.Anonymous) and g.name.lower() == WIN:
                    if window is not None:
                        raise _refuse(sql, "one window per event-query", "window")
                    window = g
                elif isinstance(g, exp.Column) and g.table != WIN:
                    self.group_keys.append(self.mapped(g, "post").strip("`"))
                else:
                    raise _refuse(sql, f"GROUP BY takes window(ts, ...) and columns, got {_spark(g)}", _spark(g)[:12])
            if window is None:
                raise _refuse(sql, "a streaming GROUP BY needs an event-time window: GROUP BY window(ts, "
                                   "'5 minutes'), keys...", "group")
            self._window_args(window)
            for item in t.expressions:
                target = item.this if isinstance(item, exp.Alias) else None
                if isinstance(target, exp.AggFunc) and _spark(target) not in aggs:
                    aggs[_spark(target)] = item.alias
            having = t.args.get("having")
            for scope in [*t.expressions, *([having.this] if having is not None else [])]:
                for a in scope.find_all(exp.AggFunc):
                    if any(isinstance(p, exp.AggFunc) for p in _parents(a)):
                        continue
                    key = _spark(a)
                    if key not in aggs:
                        aggs[key] = f"{_AGG_PREFIX}{len(aggs)}"
            for a in [*t.expressions, *([having.this] if having is not None else [])]:
                for node in a.find_all(exp.AggFunc):
                    key = _spark(node)
                    if key in aggs and all(k != key for k, _ in agg_exprs):
                        agg_exprs.append((key, self.mapped(node, "post")))
        else:
            having = t.args.get("having")
            if having is not None:
                raise _refuse(sql, "HAVING needs GROUP BY window(ts, ...)", "having")
            for a in t.find_all(exp.AggFunc):
                raise _refuse(sql, f"an aggregate needs GROUP BY window(ts, ...): {_spark(a)}", _spark(a)[:8])
        stage = "window" if window is not None else ("post" if self.join is not None else f"pre:{self.order[0]}")
        having_sql = self.mapped(having.this, "window", aggs) if window is not None and having is not None else None
        select: list[tuple[str, str | None]] = []  # (output name, expression or None for a plain column)
        ts_item = False
        for item in t.expressions:
            name = item.alias_or_name
            if not name or (not isinstance(item, exp.Alias) and not isinstance(item, exp.Column)):
                raise _refuse(sql, f"name every computed column: {_spark(item)} AS name", _spark(item)[:12])
            body = item.this if isinstance(item, exp.Alias) else item
            text = self.mapped(body, stage, aggs if window is not None else None)
            if name == self.ts:
                ts_item = True
                if text.strip("`") != self.ts:
                    want = "window_time(window)" if window is not None else (
                        f"the stream's event time {self._ts_hint()}")
                    raise _refuse(sql, f"the event-query's ts must be {want}, got {_spark(body)}", name)
            select.append((name, None if text.strip("`") == name else text))
        if not ts_item:
            raise _refuse(sql, f"the SELECT list must name the event time {self.ts!r} "
                               f"({'window_time(window) AS ' + self.ts if window is not None else self._ts_hint()})",
                          "select")
        if self.eid not in [n for n, _ in select]:
            raise _refuse(sql, f"the SELECT list must name the event id {self.eid!r} (e.g. concat_ws(':', key, "
                               f"date_format({self.ts}, 'yyyyMMddHHmm')) AS {self.eid})", "select")
        if window is None and self.join is None and self.source_ts[self.order[0]] != self.ts:
            raise _refuse(sql, f"the event time of {self.order[0]!r} is {self.source_ts[self.order[0]]!r}: "
                               f"declare the event-query's ts as it, or window the stream", "select")
        fn = self._fn(pre, post, agg_exprs, aggs, having_sql, select)
        return CompiledQuery(self.sql, tuple(self.order), fn, window is not None, tuple(n for n, _ in select),
                             plain_spark_sql(self.tree))

    def _ts_hint(self) -> str:
        if self.join is not None:
            (a, b) = self.order
            return f"greatest({a}.{self.source_ts[a]}, {b}.{self.source_ts[b]}) AS {self.ts}"
        return f"{self.source_ts[self.order[0]]}"

    def _window_args(self, w: exp.Anonymous) -> None:
        sql = self.sql
        args = w.expressions
        if len(args) not in (2, 3):
            raise _refuse(sql, "window(ts, 'size'[, 'slide']) takes two or three arguments", WIN)
        tcol = args[0]
        stage = "post" if self.join is not None else f"pre:{self.order[0]}"
        ok = isinstance(tcol, exp.Greatest) if self.join is not None else (
            isinstance(tcol, exp.Column) and tcol.name == self.source_ts[self.table_of(tcol)])
        if not ok or self.mapped(tcol, stage).strip("`") not in (self.ts, self.source_ts[self.order[0]]):
            raise _refuse(sql, f"window() is over the stream's event time ({self._ts_hint()}), got {_spark(tcol)}",
                          "window(")
        self.size = _duration(sql, args[1], "the window size")
        self.slide = _duration(sql, args[2], "the window slide") if len(args) == 3 else None
        if self.size <= timedelta(0) or (self.slide is not None and not timedelta(0) < self.slide <= self.size):
            raise _refuse(sql, "need 0 < slide <= size for a window", "window(")

    def _fn(self, pre, post, agg_exprs, aggs, having_sql, select) -> Callable:
        order, join, keys, ts = list(self.order), self.join, list(self.keys), self.ts
        lower, upper = (self.lower, self.upper) if join is not None else (None, None)
        windowed = bool(agg_exprs) or hasattr(self, "size")
        size, slide, bounds = getattr(self, "size", None), getattr(self, "slide", None), self.bounds
        group_keys = list(self.group_keys)
        agg_list = [(aggs[k], text) for k, text in agg_exprs]

        def event_query(*inputs):
            from pyspark.sql import functions as F

            streams = dict(zip(order, inputs, strict=True))
            for name in order:  # one filter per source: its WHERE conjuncts
                if pre[name]:
                    cond = " AND ".join(f"({c})" for c in pre[name])
                    streams[name] = streams[name].filter(F.expr(cond), name=f"where_{name}")
            out = streams[order[0]]
            if join is not None:
                out = out.join(streams[order[1]], on=keys, lower=lower, upper=upper, ts_out=ts)
            if post:
                out = out.filter(F.expr(" AND ".join(f"({c})" for c in post)), name="where")
            if windowed:
                out = out.window(size, slide, keys=group_keys, aggs=[F.expr(t).alias(n) for n, t in agg_list],
                                 ts_out=ts, bounds=bounds)
                if having_sql is not None:
                    out = out.filter(F.expr(having_sql), name="having")
            return out.select(*[n if e is None else F.expr(e).alias(n) for n, e in select], name="select")

        return event_query


def plain_spark_sql(tree: exp.Expression) -> str:
    """The query as plain Spark SQL runs it: ``window_time(window)`` may not stand beside
    ``GROUP BY window(...)`` there, so it is written as its value, ``window.end`` less one
    microsecond (what the instrumented window emits, :meth:`ananke.query.Provenanced.window`)."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Anonymous) and n.name.lower() == "window_time":
            return exp.Paren(this=sqlglot.parse_one(f"{WIN}.`end` - INTERVAL 1 MICROSECOND", read=DIALECT))
        return n

    return _spark(tree.copy().transform(swap))


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return [*_conjuncts(node.this), *_conjuncts(node.expression)]
    return [node]


def _parents(node: exp.Expression):
    p = node.parent
    while p is not None:
        yield p
        p = p.parent


def compile_sql(sql: str, columns: Mapping[str, Sequence[str]], source_ts: Mapping[str, str], *,
                ts: str = "ts", eid: str = "eid") -> CompiledQuery:
    """Compile ``sql`` over sources with these ``columns`` and event-time columns
    ``source_ts``; the events carry ``eid`` and ``ts``. Raises :class:`UnsupportedSql`
    (with the line in ``sql``) for anything the instrumented operators cannot express."""
    return _Compiler(sql, columns, source_ts, ts, eid).compile()
