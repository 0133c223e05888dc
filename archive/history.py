"""One history-query over one chunk, safely (M 4.3).

A template is parsed with sqlglot and must be a single read-only SELECT over registered
streams. Event attributes are ``:name`` placeholders and are always bound by the driver,
never formatted into the SQL. At run time every stream reference is replaced by that
stream restricted to the chunk's interval, so the template's author never writes the
time predicate. The query runs in a READ ONLY transaction with a statement timeout.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pandas as pd
import psycopg2
import psycopg2.errors
import sqlglot
from sqlglot import exp

from archive import history_plan
from archive.abc import HistoryQuery
from archive.chunks import task_grid
from archive.errors import (
    HistoryQueryCancelled,
    HistoryQueryFailed,
    HistoryQueryTimeout,
    MissingParameter,
    UnsafeQuery,
)
from archive.names import quote
from archive.pg import is_connection_lost

if TYPE_CHECKING:
    from archive.catalog import Catalog

# Statement kinds that must never appear anywhere inside a history-query.
_FORBIDDEN = tuple(getattr(exp, n) for n in (
    "Insert", "Update", "Delete", "Drop", "Create", "Alter", "Command", "Into", "Lock", "Merge",
    "Copy", "Set", "Transaction", "Commit", "Rollback", "Grant", "TruncateTable", "Use", "Pragma",
) if hasattr(exp, n))

# Functions that could escape the sandbox: change settings (the timeout among them), touch
# files, other sessions or other servers. READ ONLY already refuses writes.
_DENIED_FUNCTIONS = {
    "set_config", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile",
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
    "lo_get", "lo_put", "lo_from_bytea", "dblink", "dblink_exec", "dblink_connect", "pg_advisory_lock",
    "pg_advisory_xact_lock", "pg_notify", "txid_current", "nextval", "setval", "query_to_xml",
    "pg_logical_emit_message", "pg_switch_wal", "pg_create_restore_point", "pg_sleep_until",
}


def prepare(sql: str, known_streams: set[str]) -> HistoryQuery:
    """Validate ``sql`` and describe it. Raises :class:`UnsafeQuery` naming the problem.

    >>> q = prepare("SELECT avg(bw) FROM metrics h WHERE h.sid = :sid", {"metrics"})
    >>> q.streams, q.params
    (('metrics',), ('sid',))
    >>> prepare("DELETE FROM metrics", {"metrics"})
    Traceback (most recent call last):
    ...
    archive.errors.UnsafeQuery: history-query must be a single SELECT, got DELETE: 'DELETE FROM metrics'
    """
    tree = _parse(sql)
    streams = []
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    shadowing = sorted(ctes & known_streams)
    if shadowing:
        # ``WITH metrics AS (SELECT * FROM metrics)`` would read the whole stream, every
        # chunk, through a name the chunk slicing leaves alone.
        raise UnsafeQuery(f"history-query may not name a CTE after the archived stream {shadowing[0]!r}: {sql!r}")
    for table in tree.find_all(exp.Table):
        if not table.name or table.name in ctes:
            continue
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeQuery(f"history-query may not name a schema-qualified table ({table.sql('postgres')!r})")
        if table.name not in known_streams:
            known = ", ".join(sorted(known_streams)) or "none"
            raise UnsafeQuery(f"history-query reads unknown stream {table.name!r} (archived streams: {known})")
        if table.name not in streams:
            streams.append(table.name)
    if any(True for _ in tree.find_all(exp.Parameter)):
        raise UnsafeQuery(f"history-query uses a positional parameter ($n); name it (:name): {sql!r}")
    if not streams:
        raise UnsafeQuery(f"history-query reads no archived stream: {sql!r}")
    params = []
    for ph in tree.find_all(exp.Placeholder):
        if not ph.name or ph.args.get("jdbc") or not _PARAM_NAME.match(ph.name):
            raise UnsafeQuery(f"history-query uses a positional placeholder; name it (:name): {sql!r}")
        if ph.name not in params:
            params.append(ph.name)
    return HistoryQuery(sql, tuple(streams), tuple(params))


@functools.lru_cache(maxsize=512)
def _parse(sql: str) -> exp.Expression:
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeQuery("history-query is empty")
    try:
        statements = [s for s in sqlglot.parse(sql, read="postgres") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise UnsafeQuery(f"history-query does not parse: {exc.errors[0]['description'] if exc.errors else exc}") from None
    if len(statements) != 1:
        raise UnsafeQuery(f"history-query must be a single statement, got {len(statements)}: {sql!r}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        kind = tree.key.upper()
        raise UnsafeQuery(f"history-query must be a single SELECT, got {kind}: {sql!r}")
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN):
            raise UnsafeQuery(f"history-query may only read; it contains {node.key.upper()}: {sql!r}")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _DENIED_FUNCTIONS:
                raise UnsafeQuery(f"history-query may not call {name}(): {sql!r}")
    return tree


_MARK = "__moirae_param_{}_end__"
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.lru_cache(maxsize=512)
def render(sql: str, ts_cols: tuple[tuple[str, str], ...]) -> str:
    """The template with each stream replaced by its chunk slice, in psycopg2's
    ``%(name)s`` style. ``__lo`` / ``__hi`` bind the chunk interval."""
    tree = _parse(sql).copy()
    ts_of = dict(ts_cols)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name in ts_of and node.name not in ctes:
            alias = node.alias or node.name
            ts = quote(ts_of[node.name])
            sub = sqlglot.parse_one(
                f"(SELECT * FROM {quote(node.name)} WHERE {ts} >= {_MARK.format('__lo')} "
                f"AND {ts} < {_MARK.format('__hi')}) AS {quote(alias)}", read="postgres")
            return sub
        if isinstance(node, exp.Placeholder):
            return exp.column(_MARK.format(node.name))
        return node

    text = tree.transform(swap).sql(dialect="postgres")
    text = text.replace("%", "%%")
    return re.sub(r'"?__moirae_param_(\w+?)_end__"?', lambda m: f"%({m.group(1)})s", text)


def run(catalog: Catalog, query: HistoryQuery, params: Mapping[str, Any], chunk_id: int,
        conn: Any = None, timeout_ms: int | None = None) -> pd.DataFrame:
    """Run ``query`` over task interval ``chunk_id`` (the contract of
    :meth:`archive.abc.ChunkStore.run_history_query`)."""
    missing = [p for p in query.params if p not in params]
    if missing:
        raise MissingParameter(f"history-query needs a value for :{missing[0]} (given: {sorted(params)})")
    ts_cols = tuple((s, catalog.stream(s).ts_col) for s in query.streams)
    lo, hi = task_grid(catalog, query.streams).bounds(chunk_id)  # the task interval (archive.chunks)
    text = history_plan.plan_settings(catalog, query.streams, query.template) + render(query.template, ts_cols)
    bound = {**{p: params[p] for p in query.params}, "__lo": lo, "__hi": hi}
    names, _types, rows = read_only(catalog, text, bound, f"history-query over chunk {chunk_id}",
                                    query.template, conn, timeout_ms)
    return pd.DataFrame(rows, columns=names)


@contextmanager
def read_only_errors(conn, cur, what: str, timeout_message: str):
    """The body runs a read-only transaction on ``cur``; it ends with ROLLBACK (nothing
    to commit), and PostgreSQL's errors become the history-query errors naming ``what``.
    A lost connection passes through: the caller's retry reconnects (archive.pg)."""
    try:
        yield
    except psycopg2.errors.QueryCanceled as exc:
        cur.execute("ROLLBACK")
        if "timeout" in str(exc):
            raise HistoryQueryTimeout(timeout_message) from None
        raise HistoryQueryCancelled(f"{what} was cancelled") from None
    except psycopg2.Error as exc:
        if is_connection_lost(exc):
            raise
        if not conn.closed:
            cur.execute("ROLLBACK")
        msg = (exc.pgerror or str(exc)).strip().splitlines()[0]
        raise HistoryQueryFailed(f"{what} failed: {msg}") from None
    cur.execute("ROLLBACK")


def read_only(catalog: Catalog, text: str, bound: Mapping[str, Any], what: str, template: str, conn: Any = None,
              timeout_ms: int | None = None) -> tuple[list[str], list[int], list[tuple]]:
    """Run rendered ``text`` with ``bound`` parameters in a READ ONLY transaction under a
    statement timeout; returns the column names, their PostgreSQL type OIDs and the rows.
    Errors name ``what`` (and ``template`` on a timeout)."""
    if conn is None:  # a pooled connection (archive.pool): no server process started per query
        with catalog.db.connection() as own:
            return read_only(catalog, text, bound, what, template, own, timeout_ms)
    timeout = int(timeout_ms or catalog.settings.statement_timeout_ms)
    conn.autocommit = True
    with conn.cursor() as cur, read_only_errors(conn, cur, what, f"{what} exceeded {timeout} ms: {template!r}"):
        # one round trip for BEGIN, the settings and the query (PostgreSQL >= 13 applies
        # statement_timeout per statement of a multi-statement message); parallel
        # workers: archive.history_plan
        cur.execute("BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = %(__moirae_timeout)s; "
                    "SET LOCAL max_parallel_workers_per_gather = %(__moirae_workers)s; " + text,
                    {**bound, "__moirae_timeout": timeout,
                     "__moirae_workers": catalog.settings.history_parallel_workers})
        names = [d.name for d in cur.description]
        types = [d.type_code for d in cur.description]
        rows = cur.fetchall()
    return names, types, rows
