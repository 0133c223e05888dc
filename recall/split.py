"""Split a history-query template into a per-chunk SPJ query plus post-operators (M 4.3).

The Deploy Manager separates every Recall template into a Select-Project-Join part that
runs independently over each chunk, and the operators applied to the union of the
chunks' results: Group-By with aggregates, HAVING, ORDER BY / LIMIT and DISTINCT. So
that a chunk does not ship every raw row, aggregates are pushed down as *partial*
aggregates that merge across chunks (:mod:`recall.aggregate`):

============================== =========================================================
template                       per-chunk partial columns
============================== =========================================================
``count(*)`` / ``count(x)``    ``count``
``sum(x)`` / ``avg(x)``        ``sum(x)``, ``count(x)``
``min(x)`` / ``max(x)``        ``min(x)`` / ``max(x)``
variance / stddev family       ``count(x)``, ``avg(x)``, ``var_pop(x) * count(x)`` (n,
                               mean, M2: mergeable without cancellation, Chan et al.)
``count/sum/avg(DISTINCT x)``  ``array_agg(DISTINCT x)`` (the distinct values)
============================== =========================================================

Event attributes are bound parameters, ``:name`` in the template, never formatted into
SQL text (docs/ARCHITECTURE.md, invariants). The paper's style ``HAVING h.sid = e.sid`` (M 3.2) is accepted:
``e.<attr>`` becomes the placeholder ``:attr``, and HAVING conjuncts without aggregates
are pushed into the chunk query's WHERE, where indexes can serve them.

>>> q = split_template("SELECT h.sid, avg(h.bw) FROM history h GROUP BY h.sid HAVING h.sid = e.sid")
>>> q.chunk_sql
'SELECT h.sid AS g0, SUM(h.bw) AS a0_sum, COUNT(h.bw) AS a0_n FROM history AS h WHERE h.sid = :sid GROUP BY h.sid'
>>> q.params, q.columns
(('sid',), ('sid', 'avg'))
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from recall.errors import (  # noqa: F401  (RecallError re-exported)
    BadTemplate,
    RecallError,
    UnknownEventAttribute,
    UnsupportedAggregate,
)

DIALECT = "postgres"


# function name as written -> canonical kind
_VARIANCE = {
    exp.Variance: "var_samp", exp.VariancePop: "var_pop",
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
}
_SIMPLE = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
SUPPORTED = ("count", "sum", "avg", "min", "max", "variance", "var_samp", "var_pop",
             "stddev", "stddev_samp", "stddev_pop")


@dataclass(frozen=True)
class Aggregate:
    """One aggregate call of the template and the partial columns the chunk query yields.

    ``func`` is canonical (``count``, ``sum``, ``avg``, ``min``, ``max``, ``var_samp``,
    ``var_pop``, ``stddev_samp``, ``stddev_pop``); ``sql`` is the call as rendered, the
    key under which post-operators find its value.
    """

    func: str
    sql: str
    distinct: bool
    star: bool
    columns: tuple[str, ...]


@dataclass(frozen=True)
class OrderKey:
    expr: exp.Expression = field(compare=False)
    desc: bool
    nulls_first: bool


@dataclass(frozen=True)
class SplitQuery:
    """A template split into its per-chunk query and its post-operators.

    ``chunk_sql`` is what goes to ``ChunkStore.prepare`` (``:name`` placeholders, the
    Archiver adds the chunk's interval). ``aggregated`` queries yield one partial row per
    group and chunk (group keys in ``g0..``); plain SPJ queries yield result rows, with
    hidden order columns ``moirae_o0..`` when ORDER BY needs them. ``outputs`` are the
    final columns: their names and expressions over group keys and aggregates.
    """

    template: str
    chunk_sql: str
    params: tuple[str, ...]
    streams: tuple[str, ...]
    aggregated: bool
    group_sql: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    columns: tuple[str, ...]
    outputs: tuple[exp.Expression, ...] = field(compare=False)
    having: exp.Expression | None = field(compare=False)
    order: tuple[OrderKey, ...]
    limit: int | None
    offset: int
    distinct: bool
    hidden: tuple[str, ...] = ()

    @property
    def group_columns(self) -> tuple[str, ...]:
        return tuple(f"g{i}" for i in range(len(self.group_sql)))


def render(node: exp.Expression) -> str:
    """SQL text of ``node`` with placeholders written ``:name`` (the template style)."""
    swapped = node.transform(lambda n: exp.var(f":{n.name}") if isinstance(n, exp.Placeholder) else n)
    return swapped.sql(dialect=DIALECT)


def parse_select(sql: str) -> exp.Select:
    """Parse one SELECT (postgres dialect) or raise :class:`BadTemplate` saying why."""
    if not isinstance(sql, str) or not sql.strip():
        raise BadTemplate(f"a history-query template must be a non-empty SQL string, got {sql!r}")
    try:
        trees = [t for t in sqlglot.parse(sql, dialect=DIALECT) if t is not None]
    except ParseError as exc:
        raise BadTemplate(f"cannot parse history-query template {sql!r}: {exc}") from None
    if len(trees) != 1:
        raise BadTemplate(f"a history-query template must be a single statement, got {len(trees)} in {sql!r}")
    tree = trees[0]
    if isinstance(tree, exp.Select):  # fold unquoted names as PostgreSQL does: History -> history
        tree = normalize_identifiers(tree, dialect=DIALECT)
    if not isinstance(tree, exp.Select):
        raise BadTemplate(f"a history-query template must be a single SELECT, got {tree.key.upper()} in {sql!r}")
    if tree.args.get("with_") or tree.args.get("with"):
        raise BadTemplate(f"WITH is not supported in history-query templates: {sql!r}")
    if tree.find(exp.Window):
        raise BadTemplate(f"window functions (OVER) cannot be split across chunks: {sql!r}")
    if not tree.args.get("from_") and not tree.args.get("from"):
        raise BadTemplate(f"a history-query template must read FROM an archived stream: {sql!r}")
    where = tree.args.get("where")
    for sub in tree.find_all(exp.Subquery, exp.Select):
        if sub is not tree and (where is None or not any(a is where for a in _ancestors(sub))):
            raise BadTemplate(f"subqueries are only supported in WHERE (each runs within one chunk, M 4.3): {sql!r}")
    return tree


def _ancestors(node: exp.Expression):
    while node.parent is not None:
        node = node.parent
        yield node


def _bind_event_refs(tree: exp.Select, event_alias: str) -> exp.Select:
    """``e.attr`` -> ``:attr`` unless ``e`` names a table of the FROM clause."""
    aliases = {t.alias_or_name for t in tree.find_all(exp.Table)}
    if event_alias in aliases:
        return tree

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table == event_alias and not n.args.get("db"):
            return exp.Placeholder(this=n.name)
        return n

    return tree.transform(swap)


def _agg_kind(node: exp.Expression) -> str:
    for cls, kind in {**_SIMPLE, **_VARIANCE}.items():
        if type(node) is cls:
            return kind
    name = node.sql_name() if isinstance(node, exp.Func) else node.key
    if isinstance(node, exp.Anonymous):
        name = node.name
    raise UnsupportedAggregate(
        f"aggregate {name.lower()}() cannot be merged across chunks; supported: {', '.join(SUPPORTED)}")


def _is_aggregate(node: exp.Expression) -> bool:
    return isinstance(node, exp.AggFunc)


def _contains_aggregate(node: exp.Expression) -> bool:
    return any(_is_aggregate(n) for n in node.walk())


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _and(parts: list[exp.Expression]) -> exp.Expression | None:
    return exp.and_(*parts) if parts else None


def _output_name(item: exp.Expression, i: int) -> str:
    if isinstance(item, exp.Alias):
        return item.alias
    inner = item
    if isinstance(inner, exp.Column):
        return inner.name
    if isinstance(inner, exp.Filter):
        inner = inner.this
    if isinstance(inner, exp.Func):
        if isinstance(inner, exp.Anonymous):
            return inner.name.lower()
        return inner.sql_name().lower()
    return f"col{i}"


def _unique(names: list[str]) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k + 1}")
    return tuple(out)


def _partials(agg: exp.Expression, i: int) -> tuple[Aggregate, list[exp.Expression]]:
    """The partial aggregates pushed into the chunk query for one aggregate call."""
    where = None
    call = agg
    if isinstance(agg, exp.Filter):
        call, where = agg.this, agg.expression.this
    kind = _agg_kind(call)
    arg = call.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        if len(arg.expressions) != 1:
            raise UnsupportedAggregate(f"{render(agg)}: DISTINCT over several columns is not supported")
        if kind not in ("count", "sum", "avg"):
            raise UnsupportedAggregate(f"{render(agg)}: DISTINCT is supported for count, sum and avg only")
        arg = arg.expressions[0]
    star = isinstance(arg, exp.Star)
    a = "*" if star else render(arg)
    p = f"a{i}"
    if distinct:
        cond = f"({a}) IS NOT NULL" + (f" AND ({render(where)})" if where is not None else "")
        texts = {f"{p}_set": f"ARRAY_AGG(DISTINCT {a}) FILTER (WHERE {cond})"}
        where = None
    elif kind == "count":
        texts = {f"{p}_n": f"COUNT({a})"}
    elif kind in ("sum", "avg"):
        texts = {f"{p}_sum": f"SUM({a})", f"{p}_n": f"COUNT({a})"}
    elif kind in ("min", "max"):
        texts = {f"{p}_{kind}": f"{kind.upper()}({a})"}
    else:
        texts = {f"{p}_n": f"COUNT({a})",
                 f"{p}_mean": f"CAST(AVG({a}) AS DOUBLE PRECISION)",
                 f"{p}_m2": f"CAST(VAR_POP({a}) * COUNT({a}) AS DOUBLE PRECISION)"}
    exprs = []
    for alias, text in texts.items():
        e = sqlglot.parse_one(text, dialect=DIALECT)
        if where is not None:
            e = exp.Filter(this=e, expression=exp.Where(this=where.copy()))
        exprs.append(exp.alias_(e, alias))
    spec = Aggregate(func=kind, sql=render(agg), distinct=distinct, star=star, columns=tuple(texts))
    return spec, exprs


def _resolve_ref(node: exp.Expression, items: list[exp.Expression], names: tuple[str, ...]) -> exp.Expression:
    """GROUP BY / ORDER BY ``2`` or an output alias -> the select item's expression."""
    if isinstance(node, exp.Literal) and not node.is_string:
        k = int(node.this)
        if not 1 <= k <= len(items):
            raise BadTemplate(f"position {k} is not in the select list (1..{len(items)})")
        return items[k - 1].unalias()
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return items[names.index(node.name)].unalias()
    return node


@dataclass
class _Parts:
    """A parsed template taken apart: what both kinds of split need."""

    tree: exp.Select
    items: list[exp.Expression]
    names: tuple[str, ...]
    group_exprs: list[exp.Expression]
    post_having: list[exp.Expression]
    order: exp.Order | None
    order_keys: tuple[OrderKey, ...]
    limit: int | None
    offset: int
    aggregated: bool
    base: exp.Select  # the chunk query's skeleton: FROM and the pushed-down WHERE


def split_template(sql: str, event_alias: str = "e", event_attrs: tuple[str, ...] | None = None,
                   extra_where: exp.Expression | None = None) -> SplitQuery:
    """Split ``sql`` (see the module docstring). ``event_attrs``, when given, are the
    attributes events carry: a placeholder naming anything else raises
    :class:`UnknownEventAttribute`. ``extra_where`` is AND-ed into the chunk query."""
    parts = _take_apart(sql, event_alias, extra_where)
    spec = _split_aggregated(sql, parts) if parts.aggregated else _split_rows(sql, parts)
    final = parts.base
    params = tuple(dict.fromkeys(p.name for p in final.find_all(exp.Placeholder)))
    if event_attrs is not None:
        missing = [p for p in params if p not in event_attrs and not p.startswith("moirae_")]
        if missing:
            raise UnknownEventAttribute(
                f"template parameter(s) {', '.join(':' + m for m in missing)} name no event attribute "
                f"(events carry {', '.join(sorted(event_attrs))})")
    streams = tuple(dict.fromkeys(t.name for t in final.find_all(exp.Table)))
    return replace(spec, params=params, streams=streams)


def _take_apart(sql: str, event_alias: str, extra_where: exp.Expression | None) -> _Parts:
    """Parse ``sql``, push the per-row conditions (WHERE, HAVING conjuncts without an
    aggregate, ``extra_where``) down into the chunk query's skeleton."""
    tree = _bind_event_refs(parse_select(sql), event_alias)
    items = list(tree.expressions)
    if not items:
        raise BadTemplate(f"empty select list in {sql!r}")
    names = _unique([_output_name(it, i) for i, it in enumerate(items)])
    group = tree.args.get("group")
    group_exprs = [_resolve_ref(g, items, names) for g in (group.expressions if group else [])]
    having = tree.args.get("having")
    having_expr = having.this if having else None
    order = tree.args.get("order")
    aggregated = bool(group_exprs) or any(_contains_aggregate(it) for it in items) or (
        having_expr is not None and _contains_aggregate(having_expr))
    if any(isinstance(it, exp.Star) for it in items) and aggregated:
        raise BadTemplate(f"SELECT * cannot be combined with GROUP BY or aggregates: {sql!r}")

    where_parts = _conjuncts(tree.args["where"].this if tree.args.get("where") else None)
    post_having: list[exp.Expression] = []
    for c in _conjuncts(having_expr):
        (post_having if _contains_aggregate(c) else where_parts).append(c)
    if extra_where is not None:
        where_parts.append(extra_where)

    base = tree.copy()
    for key in ("group", "having", "order", "limit", "offset", "distinct", "where"):
        base.set(key, None)
    if where_parts:
        base.set("where", exp.Where(this=_and([p.copy() for p in where_parts])))

    limit, offset = _limit_offset(tree)
    order_keys = tuple(OrderKey(expr=_resolve_ref(o.this, items, names), desc=bool(o.args.get("desc")),
                                nulls_first=_nulls_first(o)) for o in (order.expressions if order else []))
    return _Parts(tree, items, names, group_exprs, post_having, order, order_keys, limit, offset, aggregated, base)


def _split_aggregated(sql: str, p: _Parts) -> SplitQuery:
    """The chunk query computes each group's partial aggregates; merging, HAVING, ORDER
    BY and LIMIT are applied to the merged partials."""
    group_sql = tuple(render(g) for g in p.group_exprs)
    aggs: dict[str, tuple[Aggregate, list[exp.Expression]]] = {}
    for scope in [*p.items, *p.post_having, *(k.expr for k in p.order_keys)]:
        for node in scope.find_all(exp.AggFunc):
            if isinstance(node.parent, exp.Filter):
                node = node.parent
            if any(_is_aggregate(n) for n in node.walk() if n is not node and not
                   (isinstance(node, exp.Filter) and n is node.this)):
                raise UnsupportedAggregate(f"nested aggregate in {render(node)}")
            key = render(node)
            if key not in aggs:
                aggs[key] = _partials(node, len(aggs))
    select = [exp.alias_(g.copy(), f"g{i}") for i, g in enumerate(p.group_exprs)]
    for _, exprs in aggs.values():
        select.extend(exprs)
    p.base.set("expressions", select)
    if p.group_exprs:
        p.base.set("group", exp.Group(expressions=[g.copy() for g in p.group_exprs]))
    outputs = tuple(it.unalias() for it in p.items)
    known = set(group_sql) | set(aggs)
    for scope in [*outputs, *p.post_having]:
        _check_grouped(scope, known, sql)
    for k in p.order_keys:
        _check_grouped(k.expr, known | set(p.names), sql)
    return SplitQuery(
        template=sql, chunk_sql=render(p.base), params=(), streams=(), aggregated=True,
        group_sql=group_sql, aggregates=tuple(a for a, _ in aggs.values()), columns=p.names,
        outputs=outputs, having=_and(p.post_having), order=p.order_keys, limit=p.limit, offset=p.offset,
        distinct=bool(p.tree.args.get("distinct")))


def _split_rows(sql: str, p: _Parts) -> SplitQuery:
    """The chunk query returns the rows themselves (ORDER BY keys that are not output
    columns ride along as hidden ones); with ORDER BY and LIMIT each chunk returns only
    its own top ``offset + limit``."""
    hidden: list[str] = []
    select = list(p.items)
    resolved = []
    for k in p.order_keys:
        text = render(k.expr)
        if text in p.names or text in [render(i.unalias()) for i in p.items]:
            resolved.append(k)
            continue
        alias = f"moirae_o{len(hidden)}"
        hidden.append(alias)
        select.append(exp.alias_(k.expr.copy(), alias))
        resolved.append(OrderKey(expr=exp.column(alias), desc=k.desc, nulls_first=k.nulls_first))
    p.base.set("expressions", select)
    p.base.set("distinct", p.tree.args.get("distinct"))
    if p.order_keys and p.limit is not None:
        # the global top-(offset+limit) lies within the union of each chunk's
        p.base.set("order", p.order.copy())
        p.base.set("limit", exp.Limit(expression=exp.Literal.number(p.limit + p.offset)))
    return SplitQuery(
        template=sql, chunk_sql=render(p.base), params=(), streams=(), aggregated=False,
        group_sql=(), aggregates=(), columns=p.names, outputs=tuple(it.unalias() for it in p.items),
        having=None, order=tuple(resolved), limit=p.limit, offset=p.offset,
        distinct=bool(p.tree.args.get("distinct")), hidden=tuple(hidden))


def _limit_offset(tree: exp.Select) -> tuple[int | None, int]:
    def number(node: exp.Expression | None, what: str) -> int | None:
        if node is None:
            return None
        value = node.args.get("expression") or node.this
        if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
            raise BadTemplate(f"{what} must be a non-negative integer literal, got {render(value)!r}")
        return int(value.this)

    return number(tree.args.get("limit"), "LIMIT"), number(tree.args.get("offset"), "OFFSET") or 0


def _nulls_first(o: exp.Ordered) -> bool:
    nf = o.args.get("nulls_first")
    if nf is None:  # postgres: NULLs sort as if larger than every value
        return bool(o.args.get("desc"))
    return bool(nf)


def _check_grouped(node: exp.Expression, known: set[str], sql: str) -> None:
    """Every column outside an aggregate must be a group key (or, in ORDER BY, an output
    alias). An unknown function over ungrouped columns is taken for an aggregate."""
    if render(node) in known:
        return
    if isinstance(node, exp.Column):
        raise BadTemplate(f"column {render(node)} must appear in GROUP BY or be used in an aggregate ({sql!r})")
    for child in node.iter_expressions():
        try:
            _check_grouped(child, known, sql)
        except UnsupportedAggregate:
            raise
        except BadTemplate:
            if isinstance(node, exp.Anonymous):
                raise UnsupportedAggregate(
                    f"{node.name.lower()}() is not a supported aggregate ({sql!r}); supported: "
                    f"{', '.join(SUPPORTED)}") from None
            raise
