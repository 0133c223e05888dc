"""Idle PostgreSQL connections kept for the next short unit of work.

A new connection costs a server process (fork, authentication, and cold catalog caches
that its first queries over a partitioned archive fill again), and the engine's short
units of work are many: each batch of events reads three context-queries, records
incidents, reads resolutions. Connecting anew for each of them would spend the driver's
time in ``psycopg2.connect`` and the server's in short-lived processes.

:class:`IdlePool` keeps up to ``keep`` connections that ended their work cleanly: no
transaction open (so no ``SET LOCAL`` or transaction lock outlives its user; session
state is not otherwise changed by the engine's code) and no error. A connection is
handed out again only if its socket has nothing to read: an idle connection the server
closed (a restart, ``pg_terminate_backend``, an idle timeout) has its end-of-file or
termination notice waiting there, and is dropped without a round trip. One idle for
longer than ``max_idle_s`` is closed rather than reused. After a ``fork`` the child
forgets the parent's connections without closing them (closing would end the parent's
sessions).

There is no upper bound on connections in use: the pool only decides what to keep.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg2.extensions

KEEP_IDLE = 4
MAX_IDLE_S = 60.0


class IdlePool:
    """Connections made by ``connect``, reused while healthy (see the module doc)."""

    def __init__(self, connect: Callable[[], Any], keep: int = KEEP_IDLE, max_idle_s: float = MAX_IDLE_S) -> None:
        self._connect = connect
        self.keep = keep
        self.max_idle_s = max_idle_s
        self._lock = threading.Lock()
        self._idle: list[tuple[Any, float]] = []  # (connection, monotonic time it came back)
        self._pid = os.getpid()
        self.made = 0  # connections opened (Database.connections_made)

    def get(self) -> Any:
        """An idle healthy connection, else a new one (``connect``'s errors pass through)."""
        stale = []
        conn = None
        with self._lock:
            self._forget_if_forked()
            now = time.monotonic()
            while self._idle:
                cand, since = self._idle.pop()
                if now - since <= self.max_idle_s and usable(cand):
                    conn = cand
                    break
                stale.append(cand)
        _close_all(stale)
        if conn is None:
            conn = self._connect()
            with self._lock:
                self.made += 1
        return conn

    def put(self, conn: Any, reuse: bool = True) -> None:
        """Take ``conn`` back: kept when ``reuse`` and it is idle outside a transaction
        and the pool has room, else closed."""
        keep = (reuse and not conn.closed
                and conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE)
        if keep:
            with self._lock:
                self._forget_if_forked()
                if len(self._idle) < self.keep:
                    del conn.notices[:]
                    self._idle.append((conn, time.monotonic()))
                    return
        _close_all([conn])

    def close(self) -> None:
        """Close the idle connections (the pool stays usable)."""
        with self._lock:
            self._forget_if_forked()
            idle, self._idle = self._idle, []
        _close_all([c for c, _ in idle])

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def _forget_if_forked(self) -> None:
        if os.getpid() != self._pid:
            self._idle, self._pid = [], os.getpid()


def usable(conn: Any) -> bool:
    """Whether an idle connection may be used: open, outside a transaction, and with
    nothing waiting on its socket (the server's goodbye, when it closed the session)."""
    if conn.closed or conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        return False
    try:
        readable, _, _ = select.select([conn], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _close_all(conns: list[Any]) -> None:
    for c in conns:
        try:
            c.close()
        except Exception:  # noqa: BLE001,S110 - a broken connection is gone either way
            pass
