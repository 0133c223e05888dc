"""How PostgreSQL plans one history-query over one chunk (M 4.3, 4.4).

Two settings go with every history-query, in its own transaction (``SET LOCAL``):

- **No parallel workers** unless ``archive.history_parallel_workers`` allows them. The
  Recall Manager runs at most N history-queries at once (``recall.max_concurrent``, M 4.4):
  that N is what bounds the history's share of the database, beside the live path's
  COPYs. PostgreSQL's default starts up to 2 workers per query, so N = 4 queries would
  be up to 12 processes, taking the cores the live path needs, and a query planned
  parallel runs slower than alone when the other queries hold the workers.
- **The index, not a seq scan, for a key the rows are clustered by.** A stream an
  event-query windows by key has its rows written sorted by that key in each chunk of
  each block of a micro-batch partition (or append), under a BRIN index on (event time, keys)
  (:mod:`archive.contributors`). PostgreSQL costs a BRIN scan by a column's *global*
  correlation, which a chunk of many sorted runs does not have, and a present chunk has
  no statistics at all (autovacuum leaves it alone); so the planner scans whole chunks.
  For a template that pins every stream it reads to one value of such a key
  (``h.sid = :sid``, or ``IN`` a list of values, as a top-level ``AND`` term of its
  ``WHERE``), every chunk is read with ``enable_seqscan = off``: through the BRIN index
  it reads the key's ranges only. A recent chunk's B-tree indexes stay open to the
  planner, which picks between them and the BRIN index by cost. Only then: a template
  reading the whole chunk runs slower through the index than by seq scan, and so would
  a pinned read of a chunk with the index whose rows were
  written before the stream was clustered (the present chunks of that moment; chunks
  older than the index do not have it, and are scanned as before). ``jit`` is off with
  it: the planner's cost of such a read still assumes the whole chunk.
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp


@functools.lru_cache(maxsize=512)
def pinned_columns(sql: str) -> dict[str, frozenset[str]]:
    """For each stream a (validated) template reads, the columns that every reference to
    it pins to one value or a list of values: a top-level ``AND`` term of the ``WHERE``
    of the SELECT naming it, ``col = :param`` (or a literal) or ``col IN (...)`` of those.

    >>> pinned_columns("SELECT avg(bw) FROM metrics h WHERE h.sid = :sid AND h.ts > :t")
    {'metrics': frozenset({'sid'})}
    >>> pinned_columns("SELECT avg(bw) FROM metrics WHERE sid = :sid OR bw > 5")
    {'metrics': frozenset()}
    >>> sorted(pinned_columns("SELECT 1 FROM metrics h JOIN users u ON u.sid = h.sid "
    ...                       "WHERE h.sid IN (:a, 3) AND u.region = 'eu'").items())
    [('metrics', frozenset({'sid'})), ('users', frozenset({'region'}))]
    """
    tree = sqlglot.parse_one(sql, read="postgres")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    refs = [t for t in tree.find_all(exp.Table) if t.name and t.name not in ctes]
    pinned: dict[int, frozenset[str]] = {}  # id of a stream reference -> its pinned columns
    for select in tree.find_all(exp.Select):
        src = select.args.get("from_") or select.args.get("from")
        tables = [n.this for n in ([src] if src else []) + list(select.args.get("joins") or [])]
        tables = [t for t in tables if isinstance(t, exp.Table) and t.name and t.name not in ctes]
        if not tables:
            continue
        by_alias = {t.alias_or_name: t for t in tables}
        cols: dict[str, set[str]] = {a: set() for a in by_alias}
        where = select.args.get("where")
        for term in _conjuncts(where.this) if where is not None else ():
            column = _pinned(term)
            if column is None:
                continue
            alias = column.table or (next(iter(by_alias)) if len(by_alias) == 1 else "")
            if alias in cols:
                cols[alias].add(column.name)
        for alias, t in by_alias.items():
            pinned[id(t)] = frozenset(cols[alias])
    out: dict[str, frozenset[str]] = {}
    for t in refs:
        mine = pinned.get(id(t), frozenset())  # a reference outside any FROM / JOIN pins nothing
        out[t.name] = out[t.name] & mine if t.name in out else mine
    return out


def _conjuncts(node: exp.Expression):
    node = node.unnest()
    if isinstance(node, exp.And):
        yield from _conjuncts(node.left)
        yield from _conjuncts(node.right)
    else:
        yield node


def _value(node: exp.Expression) -> bool:
    """A parameter or a literal, perhaps cast (``:sid::bigint``)."""
    node = node.unnest()
    while isinstance(node, exp.Cast):
        node = node.this.unnest()
    return isinstance(node, exp.Placeholder | exp.Literal)


def _pinned(term: exp.Expression) -> exp.Column | None:
    """The column ``term`` pins to given values, or None."""
    if isinstance(term, exp.EQ):
        for col, val in ((term.left, term.right), (term.right, term.left)):
            if isinstance(col, exp.Column) and _value(val):
                return col
    if (isinstance(term, exp.In) and isinstance(term.this, exp.Column) and not term.args.get("query")
            and term.expressions and all(_value(v) for v in term.expressions)):
        return term.this
    return None


def plan_settings(catalog, streams: tuple[str, ...], template: str) -> str:
    """The ``SET LOCAL`` statements (module doc) for ``template`` over ``streams``: the
    index for a clustered key when every stream is pinned by one of its cluster keys
    (``catalog``: the archive's :class:`~archive.catalog.Catalog`, or anything that
    tells a stream's ``cluster_keys``)."""
    pinned = pinned_columns(template)
    keyed = all(pinned.get(s, frozenset()) & set(catalog.cluster_keys(s)) for s in streams)
    return "SET LOCAL enable_seqscan = off; SET LOCAL jit = off; " if streams and keyed else ""
