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
SQL text (DESIGN.md §6). The paper's style ``HAVING h.sid = e.sid`` (M 3.2) is accepted:
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

from moirae.base.errors import MoiraeError

DIALECT = "postgres"


class RecallError(MoiraeError):
    """Root of the recall operators' errors."""


class BadTemplate(RecallError, ValueError):
    """A history-query template that cannot be split (not one SELECT, unparseable...)."""


class UnsupportedAggregate(BadTemplate):
    """An aggregate function whose partial states cannot be merged across chunks."""


class UnknownEventAttribute(RecallError, KeyError):
    """A template parameter that the event does not carry."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


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


def split_template(sql: str, event_alias: str = "e", event_attrs: tuple[str, ...] | None = None,
                   extra_where: exp.Expression | None = None) -> SplitQuery:
    """Split ``sql`` (see the module docstring). ``event_attrs``, when given, are the
    attributes events carry: a placeholder naming anything else raises
    :class:`UnknownEventAttribute`. ``extra_where`` is AND-ed into the chunk query."""
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
    ordered = list(order.expressions) if order else []
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
                                nulls_first=_nulls_first(o)) for o in ordered)
    if aggregated:
        group_sql = tuple(render(g) for g in group_exprs)
        aggs: dict[str, tuple[Aggregate, list[exp.Expression]]] = {}
        for scope in [*items, *post_having, *(k.expr for k in order_keys)]:
            for node in scope.find_all(exp.AggFunc):
                if isinstance(node.parent, exp.Filter):
                    node = node.parent
                if any(_is_aggregate(n) for n in node.walk() if n is not node and not
                       (isinstance(node, exp.Filter) and n is node.this)):
                    raise UnsupportedAggregate(f"nested aggregate in {render(node)}")
                key = render(node)
                if key not in aggs:
                    aggs[key] = _partials(node, len(aggs))
        select = [exp.alias_(g.copy(), f"g{i}") for i, g in enumerate(group_exprs)]
        for _, exprs in aggs.values():
            select.extend(exprs)
        base.set("expressions", select)
        if group_exprs:
            base.set("group", exp.Group(expressions=[g.copy() for g in group_exprs]))
        outputs = tuple(it.unalias() for it in items)
        known = set(group_sql) | set(aggs)
        for scope in [*outputs, *post_having]:
            _check_grouped(scope, known, sql)
        for k in order_keys:
            _check_grouped(k.expr, known | set(names), sql)
        spec = SplitQuery(
            template=sql, chunk_sql=render(base), params=(), streams=(), aggregated=True,
            group_sql=group_sql, aggregates=tuple(a for a, _ in aggs.values()), columns=names,
            outputs=outputs, having=_and(post_having), order=order_keys, limit=limit, offset=offset,
            distinct=bool(tree.args.get("distinct")))
    else:
        hidden: list[str] = []
        select = list(items)
        resolved = []
        for k in order_keys:
            text = render(k.expr)
            if text in names or text in [render(i.unalias()) for i in items]:
                resolved.append(k)
                continue
            alias = f"moirae_o{len(hidden)}"
            hidden.append(alias)
            select.append(exp.alias_(k.expr.copy(), alias))
            resolved.append(OrderKey(expr=exp.column(alias), desc=k.desc, nulls_first=k.nulls_first))
        base.set("expressions", select)
        base.set("distinct", tree.args.get("distinct"))
        if ordered and limit is not None:
            # the global top-(offset+limit) lies within the union of each chunk's
            base.set("order", order.copy())
            base.set("limit", exp.Limit(expression=exp.Literal.number(limit + offset)))
        spec = SplitQuery(
            template=sql, chunk_sql=render(base), params=(), streams=(), aggregated=False,
            group_sql=(), aggregates=(), columns=names, outputs=tuple(it.unalias() for it in items),
            having=None, order=tuple(resolved), limit=limit, offset=offset,
            distinct=bool(tree.args.get("distinct")), hidden=tuple(hidden))
    final = base
    params = tuple(dict.fromkeys(p.name for p in final.find_all(exp.Placeholder)))
    if event_attrs is not None:
        missing = [p for p in params if p not in event_attrs and not p.startswith("moirae_")]
        if missing:
            raise UnknownEventAttribute(
                f"template parameter(s) {', '.join(':' + m for m in missing)} name no event attribute "
                f"(events carry {', '.join(sorted(event_attrs))})")
    streams = tuple(dict.fromkeys(t.name for t in final.find_all(exp.Table)))
    return replace(spec, params=params, streams=streams)


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
