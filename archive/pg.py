"""Where the archive lives: an embedded PostgreSQL (``pgserver``) or an external one.

By default the engine starts an embedded server under its data directory and reuses it
across runs; ``MOIRAE_PG_DSN`` points it at any reachable server instead (DESIGN.md §5).
A :class:`Database` may be confined to one schema, which is how tests and benchmarks
share one server without seeing each other's tables.
"""

from __future__ import annotations

import os
import re
import warnings
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import psycopg2.extensions

from scheduler.errors import MoiraeError

ENV_DSN = "MOIRAE_PG_DSN"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class DatabaseUnavailable(MoiraeError, ConnectionError):
    """The configured PostgreSQL cannot be reached or started."""


def embedded_dsn(data_dir: str | os.PathLike) -> str:
    """Start (or reuse) the embedded server whose data lives in ``data_dir/pg``; return its DSN."""
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - a broken install
        raise DatabaseUnavailable("the embedded PostgreSQL needs the `pgserver` package") from exc
    pgdata = Path(data_dir).resolve() / "pg"
    pgdata.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            server = pgserver.get_server(str(pgdata), cleanup_mode=None)
    except Exception as exc:
        raise DatabaseUnavailable(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
    return server.get_uri()


class Database:
    """A DSN plus an optional schema. Connections are plain psycopg2 connections.

    ``schema`` (if given) is created on first use and put first on the search path of
    every connection, so unqualified table names land there.
    """

    def __init__(self, dsn: str, schema: str | None = None) -> None:
        if schema is not None and not _SCHEMA_RE.match(schema):
            raise ValueError(f"schema must be a lower-case SQL identifier, got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        if schema is not None:
            with self.connection(search_path=False) as conn, conn.cursor() as cur:
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')

    @classmethod
    def from_env(cls, data_dir: str | os.PathLike, schema: str | None = None) -> Database:
        """``MOIRAE_PG_DSN`` if set, else the embedded server under ``data_dir``."""
        dsn = os.environ.get(ENV_DSN) or embedded_dsn(data_dir)
        return cls(dsn, schema)

    def connect(self, search_path: bool = True, **kwargs) -> psycopg2.extensions.connection:
        """A new connection (the caller closes it)."""
        options = kwargs.pop("options", "")
        if search_path and self.schema:
            options = f"{options} -c search_path={self.schema},public".strip()
        try:
            return psycopg2.connect(self.dsn, options=options or None, **kwargs)
        except psycopg2.OperationalError as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {_redact(self.dsn)}: {exc}".strip()) from exc

    @contextmanager
    def connection(self, search_path: bool = True, autocommit: bool = True):
        """A short-lived connection, committed on success and closed on exit."""
        conn = self.connect(search_path=search_path)
        conn.autocommit = autocommit
        try:
            yield conn
            if not autocommit:
                conn.commit()
        except BaseException:
            if not autocommit:
                conn.rollback()
            raise
        finally:
            conn.close()

    def drop_schema(self) -> None:
        """Drop this database's schema and everything in it (tests and benchmarks)."""
        if self.schema:
            with self.connection(search_path=False) as conn, conn.cursor() as cur:
                cur.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def _redact(dsn: str) -> str:
    return re.sub(r"(password=|:)([^@\s]+)@", r"\1***@", dsn)
