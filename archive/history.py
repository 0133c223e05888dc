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

from archive import history_plan, reader_role, row_flags
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
from archive.row_flags import RowFlags

if TYPE_CHECKING:
    from archive.catalog import Catalog

# Statement kinds that must never appear anywhere inside a history-query. Every name must
# exist in the installed sqlglot: a renamed class would silently drop its rule, so a
# missing one closes the door instead (every history-query is refused, naming it).
_FORBIDDEN_NAMES = ("Insert", "Update", "Delete", "Drop", "Create", "Alter", "Command", "Into", "Lock", "Merge",
                    "Copy", "Set", "Transaction", "Commit", "Rollback", "Grant", "TruncateTable", "Use", "Pragma")
# the node classes the other rules test for (functions, parameters, tables, CTEs)
_RULE_NAMES = ("Anonymous", "Func", "Placeholder", "Parameter", "Table", "CTE", "Query")
_MISSING_RULES = tuple(n for n in (*_FORBIDDEN_NAMES, *_RULE_NAMES) if not isinstance(getattr(exp, n, None), type))
_FORBIDDEN = tuple(getattr(exp, n) for n in _FORBIDDEN_NAMES if n not in _MISSING_RULES)

# Functions that could escape the sandbox: change settings (the timeout among them), touch
# files, other sessions or other servers. READ ONLY already refuses writes.
_DENIED_FUNCTIONS = {
    "set_config", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile",
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
    "lo_get", "lo_put", "lo_from_bytea", "dblink", "dblink_exec", "dblink_connect", "pg_advisory_lock",
    "pg_advisory_xact_lock", "pg_notify", "txid_current", "nextval", "setval", "query_to_xml",
    "pg_logical_emit_message", "pg_switch_wal", "pg_create_restore_point", "pg_sleep_until",
    "ts_stat", "ts_rewrite", "pg_file_write",
}
#: Families denied by prefix: every function that runs SQL given as a string (``query_to_xml``,
#: ``cursor_to_xml``, ``dblink``...) or dumps whole tables, schemas or databases, or reads files.
_DENIED_PREFIXES = ("query_to_xml", "cursor_to_xml", "table_to_xml", "schema_to_xml", "database_to_xml",
                    "dblink", "lo_", "pg_read_", "pg_ls_", "pg_stat_file", "pg_file_", "pg_advisory",
                    "pg_try_advisory")


def denied_function(name: str) -> bool:
    """Whether a history-query may not call the function ``name`` (any case).

    >>> denied_function("QUERY_TO_XML_AND_XMLSCHEMA"), denied_function("avg")
    (True, False)
    """
    name = name.lower().rsplit(".", 1)[-1]
    return name in _DENIED_FUNCTIONS or name.startswith(_DENIED_PREFIXES)


def prepare(sql: str, known_streams: set[str], references: set[str] | frozenset[str] = frozenset()) -> HistoryQuery:
    """Validate ``sql`` and describe it. Raises :class:`UnsafeQuery` naming the problem.
    ``references`` are reference tables it may also read (:mod:`archive.reference`),
    read-only and as of the event's time.

    >>> q = prepare("SELECT avg(bw) FROM metrics h WHERE h.sid = :sid", {"metrics"})
    >>> q.streams, q.params
    (('metrics',), ('sid',))
    >>> prepare("DELETE FROM metrics", {"metrics"})
    Traceback (most recent call last):
    ...
    archive.errors.UnsafeQuery: history-query must be a single SELECT, got DELETE: 'DELETE FROM metrics'
    """
    tree = _parse(sql)
    streams, refs = [], []
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    shadowing = sorted(ctes & (set(known_streams) | set(references)))
    if shadowing:
        # ``WITH metrics AS (SELECT * FROM metrics)`` would read the whole stream, every
        # chunk, through a name the chunk slicing leaves alone.
        raise UnsafeQuery(f"history-query may not name a CTE after the archived stream {shadowing[0]!r}: {sql!r}")
    for table in tree.find_all(exp.Table):
        if not table.name or table.name in ctes:
            continue
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeQuery(f"history-query may not name a schema-qualified table ({table.sql('postgres')!r})")
        if table.name in references and table.name not in known_streams:
            if table.name not in refs:
                refs.append(table.name)
            continue
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
    return HistoryQuery(sql, tuple(streams), tuple(params), tuple(refs))


@functools.lru_cache(maxsize=512)
def _parse(sql: str) -> exp.Expression:
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeQuery("history-query is empty")
    if _MISSING_RULES:  # fail closed: a rule that cannot be checked refuses every query
        raise UnsafeQuery(f"history-queries are refused: sqlglot {sqlglot.__version__} has no "
                          f"{', '.join('exp.' + n for n in _MISSING_RULES)} (the safety rules need it; "
                          "install the sqlglot version pyproject.toml pins)")
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
            if denied_function(name):
                raise UnsafeQuery(f"history-query may not call {name}(): {sql!r}")
    return tree


_MARK = "__moirae_param_{}_end__"
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.lru_cache(maxsize=512)
def render(sql: str, ts_cols: tuple[tuple[str, str], ...],
           refs: tuple[tuple[str, str, tuple[str, ...]], ...] = ()) -> str:
    """The template with each stream replaced by its chunk slice, in psycopg2's
    ``%(name)s`` style. ``__lo`` / ``__hi`` bind the chunk interval. ``refs`` are the
    reference tables read, ``(name, physical table, columns)``: each is replaced by its
    rows valid at ``__as_of`` (:mod:`archive.reference`)."""
    tree = _parse(sql).copy()
    ts_of = dict(ts_cols)
    ref_of = {name: (table, cols) for name, table, cols in refs}
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name in ref_of and node.name not in ctes:
            table, cols = ref_of[node.name]
            at = _MARK.format("__as_of")
            return sqlglot.parse_one(
                f"(SELECT {', '.join(quote(c) for c in cols)} FROM {quote(table)} WHERE _valid_from <= {at} "
                f"AND (_valid_to IS NULL OR _valid_to > {at})) AS {quote(node.alias or node.name)}", read="postgres")
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
        conn: Any = None, timeout_ms: int | None = None,
        refs: tuple[tuple[str, str, tuple[str, ...]], ...] = (), flags: RowFlags | None = None) -> pd.DataFrame:
    """Run ``query`` over task interval ``chunk_id`` (the contract of
    :meth:`archive.abc.ChunkStore.run_history_query`). ``refs`` describe the reference
    tables it reads (:func:`render`); they are read as of ``params["__as_of"]``, the
    event's time. A stream ``flags`` has active flags for is read through them
    (:mod:`archive.row_flags`: removed rows left out, corrected ones with their new
    values); the template of a stream without flags runs as written."""
    missing = [p for p in query.params if p not in params]
    if missing:
        raise MissingParameter(f"history-query needs a value for :{missing[0]} (given: {sorted(params)})")
    if query.references and "__as_of" not in params:
        raise MissingParameter(f"history-query reads reference table {query.references[0]!r} and needs the "
                               "event's time to read it as of (__as_of)")
    ts_cols = tuple((s, catalog.stream(s).ts_col) for s in query.streams)
    lo, hi = task_grid(catalog, query.streams).bounds(chunk_id)  # the task interval (archive.chunks)
    template, bound = query.template, {**{p: params[p] for p in query.params}, "__lo": lo, "__hi": hi}
    bad = row_flags.flagged(flags, query.streams)
    if bad:  # only then: a stream without flags costs nothing more
        template = row_flags.flagged_template(template, bad)
        bound.update(row_flags.flag_params(flags, bad, lo, hi))
    text = history_plan.plan_settings(catalog, query.streams, query.template) + render(template, ts_cols, refs)
    if query.references:
        bound["__as_of"] = params["__as_of"]
    names, _types, rows = read_only(catalog, text, bound, f"history-query over chunk {chunk_id}",
                                    query.template, conn, timeout_ms)
    return pd.DataFrame(rows, columns=names)


@contextmanager
def read_only_errors(conn, cur, what: str, timeout_message: str, grant_misses: bool = False):
    """The body runs a read-only transaction on ``cur``; it ends with ROLLBACK (nothing
    to commit), and PostgreSQL's errors become the history-query errors naming ``what``.
    A lost connection passes through: the caller's retry reconnects (archive.pg); so does
    a permission refusal when ``grant_misses`` (the caller grants and runs again)."""
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
        if grant_misses and reader_role.is_missing_grant(exc):
            raise
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
    streams = frozenset(catalog.names())
    role = reader_role.ensure(catalog.db, streams)  # only SELECT on streams and reference tables
    for attempt in (0, 1):
        try:
            with conn.cursor() as cur, read_only_errors(conn, cur, what, f"{what} exceeded {timeout} ms: {template!r}",
                                                        grant_misses=attempt == 0):
                # one round trip for BEGIN, the settings, the role and the query (PostgreSQL
                # >= 13 applies statement_timeout per statement of a multi-statement
                # message); parallel workers: archive.history_plan
                cur.execute("BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = %(__moirae_timeout)s; "
                            "SET LOCAL max_parallel_workers_per_gather = %(__moirae_workers)s; "
                            f"SET LOCAL ROLE {quote(role)}; " + text,
                            {**bound, "__moirae_timeout": timeout,
                             "__moirae_workers": catalog.settings.history_parallel_workers})
                names = [d.name for d in cur.description]
                types = [d.type_code for d in cur.description]
                rows = cur.fetchall()
            return names, types, rows
        except psycopg2.Error as exc:  # a table created since the grants: grant it, run again
            if not reader_role.is_missing_grant(exc):
                raise
            role = reader_role.ensure(catalog.db, streams, refresh=True)
    raise AssertionError("unreachable")
