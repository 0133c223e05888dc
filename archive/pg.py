"""Where the archive lives: an embedded PostgreSQL (``pgserver``) or an external one.

By default the engine starts an embedded server under its data directory and reuses it
across runs; ``MOIRAE_PG_DSN`` points it at any reachable server instead.
A :class:`Database` may be confined to one schema, which is how tests and benchmarks
share one server without seeing each other's tables.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg2
import psycopg2.extensions

from archive.errors import DatabaseUnavailable
from archive.pool import IdlePool
from archive.schema import OUTAGES_DDL, table_exists
from moirae.base.redact import redact, redact_all

ENV_DSN = "MOIRAE_PG_DSN"
ENV_RETRY = "MOIRAE_PG_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 120.0
ENV_CLIENT_TIMEOUT = "MOIRAE_PG_CLIENT_TIMEOUT_S"
DEFAULT_CLIENT_TIMEOUT_S = 15.0
log = logging.getLogger(__name__)
T = TypeVar("T")
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def is_connection_lost(exc: BaseException) -> bool:
    """True for errors that mean the server is gone or not accepting connections (retry
    later), False for errors of the statement itself (a timeout, a cancel, bad SQL).

    >>> is_connection_lost(psycopg2.OperationalError("server closed the connection unexpectedly"))
    True
    >>> is_connection_lost(ValueError("invalid input syntax"))
    False
    """
    if isinstance(exc, DatabaseUnavailable):
        return exc.__cause__ is None or is_connection_lost(exc.__cause__)
    if not isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError):
        return False
    code = getattr(exc, "pgcode", None)
    # no SQLSTATE: the socket broke; 08: connection exception; 57P01-03: admin shutdown,
    # crash shutdown, cannot connect now (starting up)
    return code is None or code.startswith("08") or code in ("57P01", "57P02", "57P03")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Health:
    """The reachability of one server, as the engine saw it: the outage under way (if
    any) and the finished ones, each with its start, end, retries and last error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: dict[str, Any] | None = None
        self.outages: list[dict[str, Any]] = []

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            if self.current is None:
                self.current = {"start": _now(), "end": None, "retries": 0, "during": what}
                log.warning("PostgreSQL unreachable (%s): %s; retrying with backoff", what, _one_line(exc))
            self.current["retries"] += 1
            self.current["last_error"] = _one_line(exc)

    def recovered(self) -> dict[str, Any] | None:
        """End the outage under way (if any) and return it."""
        with self._lock:
            done, self.current = self.current, None
            if done is None:
                return None
            done["end"] = _now()
            self.outages.append(done)
        log.warning("PostgreSQL reachable again after %d retries (outage since %s)", done["retries"], done["start"])
        return done

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {"state": "down" if self.current else "up", "current": dict(self.current or {}) or None,
                    "outages": [dict(o) for o in self.outages]}


_HEALTH: dict[str, Health] = {}
_HEALTH_LOCK = threading.Lock()


def health(dsn: str) -> Health:
    """The one :class:`Health` record of a DSN in this process."""
    with _HEALTH_LOCK:
        return _HEALTH.setdefault(dsn, Health())




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
        raise DatabaseUnavailable(redact(f"could not start the embedded PostgreSQL in {pgdata}: {exc}")) from exc
    return server.get_uri()


class Database:
    """A DSN plus an optional schema. Connections are plain psycopg2 connections.

    ``schema`` (if given) is created on first use and put first on the search path of
    every connection, so unqualified table names land there. :meth:`connection` reuses
    connections that ended their work cleanly (:mod:`archive.pool`); :meth:`connect`
    always opens a new one, for a caller that keeps it.
    """

    def __init__(self, dsn: str, schema: str | None = None, retry_seconds: float | None = None) -> None:
        if schema is not None and not _SCHEMA_RE.match(schema):
            raise ValueError(f"schema must be a lower-case SQL identifier, got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self.retry_seconds = float(os.environ.get(ENV_RETRY, DEFAULT_RETRY_SECONDS)
                                   if retry_seconds is None else retry_seconds)
        self.health = health(dsn)
        self._reached = False  # before the first answer an unreachable server is an error, not an outage
        # the pools' connect must not hold self: a Database nobody holds is freed at once,
        # and its idle connections close with it (no cycle waiting for the collector)
        self._pools = {flag: IdlePool(functools.partial(_open, dsn, schema if flag else None)) for flag in (True, False)}
        if schema is not None:
            with self.connection(search_path=False) as conn, conn.cursor() as cur:
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')

    @classmethod
    def from_env(cls, data_dir: str | os.PathLike, schema: str | None = None) -> Database:
        """``MOIRAE_PG_DSN`` if set, else the embedded server under ``data_dir``."""
        dsn = os.environ.get(ENV_DSN) or embedded_dsn(data_dir)
        return cls(dsn, schema)

    def retry(self, fn: Callable[[], T], what: str, on_lost: Callable[[], Any] | None = None) -> T:
        """Run ``fn`` (one whole unit of work: a connection, a transaction, an idempotent
        append), again with exponential backoff (0.1 s doubling to 5 s) while it fails
        because the server became unreachable, for at most ``retry_seconds``. Every other
        error passes through at once, and so does a server never reached yet (a wrong
        DSN is a configuration error, not an outage). The outage is recorded in :attr:`health` and, once
        the server answers again, in the ``moirae_outages`` table (``archive status``).
        ``on_lost`` runs after each lost attempt (e.g. to drop a dead connection)."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.1
        while True:
            try:
                out = fn()
            except Exception as exc:
                if not is_connection_lost(exc) or not self._reached:
                    raise
                self.health.failed(what, exc)
                if on_lost is not None:
                    on_lost()
                if time.monotonic() + delay > deadline:
                    raise DatabaseUnavailable(
                        f"PostgreSQL at {_redact(self.dsn)} unreachable for {self.retry_seconds:g}s "
                        f"({what}): {_one_line(exc)}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._reached = True
            if self.health.current is not None:
                done = self.health.recovered()
                if done is not None:
                    self._record_outage(done)
            return out

    def _record_outage(self, outage: dict[str, Any]) -> None:
        try:
            conn = self._connect_once(True)
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute(OUTAGES_DDL)
                    cur.execute("INSERT INTO moirae_outages (start_ts, end_ts, retries, during, last_error) "
                                "VALUES (%s, %s, %s, %s, %s)", (outage["start"], outage["end"], outage["retries"],
                                                                outage["during"], outage.get("last_error")))
            finally:
                conn.close()
        except Exception as exc:  # the report is best effort; the in-memory record stays
            log.warning("could not record the PostgreSQL outage: %s", _one_line(exc))

    def outages(self, limit: int = 20) -> dict[str, Any]:
        """The outage under way (this process) and the recorded ones (any process), newest first."""
        report = self.health.report()
        with self.connection() as conn, conn.cursor() as cur:
            rows = []
            if table_exists(cur, "moirae_outages"):
                cur.execute("SELECT start_ts, end_ts, retries, during, last_error FROM moirae_outages "
                            "ORDER BY id DESC LIMIT %s", (limit,))
                rows = cur.fetchall()
        keys = ("start", "end", "retries", "during", "last_error")
        report["outages"] = [json.loads(json.dumps(dict(zip(keys, r, strict=True)), default=str)) for r in rows]
        return redact_all(report)  # rows written before redaction existed too

    def connect(self, search_path: bool = True, **kwargs) -> psycopg2.extensions.connection:
        """A new connection (the caller closes it); retried with backoff while the server
        is unreachable (:meth:`retry`)."""
        return self.retry(lambda: self._connect_once(search_path, **kwargs), "connect")

    def _connect_once(self, search_path: bool = True, **kwargs) -> psycopg2.extensions.connection:
        return _open(self.dsn, self.schema if search_path else None, **kwargs)

    @contextmanager
    def connection(self, search_path: bool = True, autocommit: bool = True):
        """A connection for one unit of work, committed on success (``autocommit=False``).
        It comes from the idle pool or is new, retried with backoff while the server is
        unreachable; after success it goes back to the pool, after an error it is closed
        (its transaction rolls back with it)."""
        pool = self._pools[search_path]
        conn = self.retry(pool.get, "connect")
        ok = False
        try:
            conn.autocommit = autocommit
            yield conn
            if not autocommit:
                conn.commit()
            ok = True
        finally:
            pool.put(conn, reuse=ok)

    def connections_made(self) -> int:
        """How many connections :meth:`connection` has opened (reused ones not counted)."""
        return sum(p.made for p in self._pools.values())

    def close(self) -> None:
        """Close the idle connections. The database stays usable: the next unit of work
        connects anew."""
        for pool in self._pools.values():
            pool.close()

    def drop_schema(self) -> None:
        """Drop this database's schema and everything in it (tests and benchmarks)."""
        if self.schema:
            with self.connection(search_path=False) as conn, conn.cursor() as cur:
                cur.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def client_timeouts(dsn: str, seconds: float | None = None) -> dict[str, Any]:
    """libpq's client-side timeouts for a connection to ``dsn`` (those the DSN does not set
    itself): ``connect_timeout``, TCP keepalives and ``tcp_user_timeout``, all derived from
    ``seconds`` (``MOIRAE_PG_CLIENT_TIMEOUT_S``, default 15). A server that vanishes from
    the network (a partition, a blackhole: no reset ever arrives) then fails the
    connection within about that long, and :meth:`Database.retry` takes over, instead of
    a read blocked forever.

    >>> t = client_timeouts("host=db connect_timeout=3", 12)
    >>> "connect_timeout" in t, t["tcp_user_timeout"], t["keepalives_idle"]
    (False, 12000, 4)
    """
    s = float(os.environ.get(ENV_CLIENT_TIMEOUT, DEFAULT_CLIENT_TIMEOUT_S) if seconds is None else seconds)
    whole = max(1, round(s))
    wanted = {"connect_timeout": whole, "keepalives": 1, "keepalives_idle": max(1, whole // 3),
              "keepalives_interval": max(1, whole // 6), "keepalives_count": 3,
              "tcp_user_timeout": int(s * 1000)}
    try:
        given = psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.ProgrammingError:  # psycopg2.connect says what is wrong with it
        given = {}
    return {k: v for k, v in wanted.items() if k not in given}


def _open(dsn: str, schema: str | None, **kwargs) -> psycopg2.extensions.connection:
    """A new connection, with ``schema`` first on its search path when given, and the
    client-side timeouts of :func:`client_timeouts`."""
    options = kwargs.pop("options", "")
    if schema:
        options = f"{options} -c search_path={schema},public".strip()
    try:
        return psycopg2.connect(dsn, options=options or None, **{**client_timeouts(dsn), **kwargs})
    except psycopg2.OperationalError as exc:
        raise DatabaseUnavailable(redact(f"cannot connect to PostgreSQL at {dsn}: {exc}".strip())) from exc


def _one_line(exc: BaseException) -> str:
    """``exc`` as one line, its secrets redacted (:mod:`moirae.base.redact`)."""
    return redact(" ".join(str(exc).split())) or type(exc).__name__


def _redact(dsn: str) -> str:
    return redact(dsn)
