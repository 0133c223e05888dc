"""The role history- and context-queries run under: it may only SELECT the archived
streams and the reference tables (M 4.3's sandbox, enforced by the server as well as by
the parser in :mod:`archive.history`).

:func:`ensure` creates the role (``NOLOGIN``; cluster-wide, so one per server), makes
the engine's own role a member (so ``SET LOCAL ROLE`` may switch to it), and grants it
``USAGE`` on the archive's schema and ``SELECT`` on each stream and reference table
(``moirae_ref_*``) not granted yet by this process. :func:`archive.history.read_only`
calls it, and runs every query with ``SET LOCAL ROLE`` inside its READ ONLY
transaction: a function that runs SQL from a string, had it slipped past the parser,
would still see nothing but those tables, with no right to write or to change a
setting that needs privilege. A table created later (a new stream, a new reference
table) is granted when a query is refused for want of it (:func:`is_missing_grant`).

The role is ``moirae_reader`` (``MOIRAE_HISTORY_ROLE`` names another, created by an
administrator when the engine's role may not create roles). An engine role that can
neither create the role nor find it makes every history-query fail with one line saying
what to run.
"""

from __future__ import annotations

import os
import threading

import psycopg2
import psycopg2.errors

from archive.errors import HistoryQueryFailed
from archive.names import quote

ENV_ROLE = "MOIRAE_HISTORY_ROLE"
DEFAULT_ROLE = "moirae_reader"
GRANT_LOCK = 0x6D6F6972_6165  # the session advisory lock serializing Moirae's grants on one server
_lock = threading.Lock()
_granted: dict[tuple[str, str | None], set[str]] = {}  # (dsn, schema) -> tables granted (and "" = role ready)


def role_name() -> str:
    return os.environ.get(ENV_ROLE) or DEFAULT_ROLE


def is_missing_grant(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's "permission denied" (a table not granted yet)."""
    return isinstance(exc, psycopg2.Error) and getattr(exc, "pgcode", None) == "42501"


def ensure(db, tables: set[str] | frozenset[str], refresh: bool = False) -> str:
    """The reader role of ``db`` (an :class:`archive.pg.Database`), created and granted
    ``SELECT`` on ``tables`` and on every reference table (see the module doc); returns
    its name. ``refresh`` forgets what this process granted (after a refusal)."""
    role = role_name()
    key = (db.dsn, db.schema)
    with _lock:
        done = _granted.setdefault(key, set())
        if refresh:
            done.clear()
        todo = set(tables) - done
        if "" in done and not todo:
            return role
    with db.connection() as conn, conn.cursor() as cur:
        # one granter at a time on the server: two GRANTs on one catalog row (the role,
        # the schema, a table) at once fail with "tuple concurrently updated"
        cur.execute("SELECT pg_advisory_lock(%s)", (GRANT_LOCK,))
        try:
            if "" not in done:
                _create(cur, role, db.schema)
            cur.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm') "
                        "AND (c.relname = ANY(%s) OR c.relname LIKE 'moirae\\_ref\\_%%') "
                        "AND NOT has_table_privilege(%s, c.oid, 'SELECT')", (sorted(todo), role))
            for (table,) in cur.fetchall():
                _grant(cur, f"GRANT SELECT ON TABLE {quote(table)} TO {quote(role)}")
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (GRANT_LOCK,))
    with _lock:
        _granted[key] |= todo | {""}
    return role


def _create(cur, role: str, schema: str | None) -> None:
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
    if cur.fetchone() is None:
        try:
            cur.execute(f"CREATE ROLE {quote(role)} NOLOGIN NOINHERIT")
        except psycopg2.errors.DuplicateObject:  # another engine made it meanwhile
            pass
        except psycopg2.errors.InsufficientPrivilege:
            raise HistoryQueryFailed(
                f"history-queries need the read-only role {role!r}, and this database user may not create "
                f"roles: run CREATE ROLE {role} NOLOGIN; GRANT {role} TO <the engine's user>; as an "
                f"administrator (or set {ENV_ROLE} to a role that can only read)") from None
    cur.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,))
    if not cur.fetchone()[0]:
        _grant(cur, f"GRANT {quote(role)} TO CURRENT_USER")
    if schema:
        _grant(cur, f"GRANT USAGE ON SCHEMA {quote(schema)} TO {quote(role)}")


def _grant(cur, statement: str) -> None:
    """Run a GRANT; concurrent grants on one object may collide ("tuple concurrently
    updated"), and one retry settles it."""
    for attempt in (0, 1):
        try:
            cur.execute(statement)
            return
        except psycopg2.errors.InternalError_:
            if attempt:
                raise
        except psycopg2.errors.InsufficientPrivilege as exc:
            raise HistoryQueryFailed(f"cannot set up the read-only role for history-queries ({statement}): "
                                      f"{str(exc).strip()}") from None
