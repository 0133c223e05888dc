"""Which of a stream's BRIN time indexes a live process reads through.

:func:`archive.contributors.ensure_time_index` keeps one BRIN index per stream, on the
event time and the keys the stream's rows are clustered by, and drops the stream's other
such indexes: each costs every write, and a process deployed with new keys should not
leave its old index behind. But two live processes whose event-queries window one stream
by different keys would each drop the other's index at start, and the other's window
reads would then scan whole chunks.

So a process *claims* the index it reads through: a session-level shared advisory lock,
held by a connection of its own for as long as the Archiver lives. A process ensuring
another index drops only the indexes no session claims (an exclusive try-lock in its DDL
transaction, :func:`unclaimed`, which fails while any process holds the shared one). A
claim ends with its session: a process that stopped, crashed or was redeployed with
other keys claims nothing any more, and its index is dropped at the next start as
before. A claim the server lost (a restart) is taken again by :meth:`IndexClaims.keep_alive`,
which the stream's BRIN summarizer calls on its passes; an index another process dropped
in the meantime, finding it unclaimed, is then built again
(:func:`archive.brin_summary.restore_claimed`).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import suppress
from typing import Any

log = logging.getLogger(__name__)

#: seconds between two checks of the claims' connection by :meth:`IndexClaims.keep_alive`
KEEP_ALIVE_SECONDS = 10.0


def claim_key(schema: str | None, index: str) -> str:
    """The advisory-lock text of ``index`` in ``schema`` (lock keys span the database).

    >>> claim_key("t1", "metrics__ts_sid_brin")
    'moirae_brin:t1.metrics__ts_sid_brin'
    """
    return f"moirae_brin:{schema or ''}.{index}"


def unclaimed(cur: Any, schema: str | None, index: str) -> bool:
    """Whether no session claims ``index``; if so, the calling transaction holds it
    exclusively until it ends, so no claim can start before its DROP commits."""
    cur.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (claim_key(schema, index),))
    return bool(cur.fetchone()[0])


class IndexClaims:
    """One process's claims on the time indexes of one database schema (module doc).
    Thread-safe; holds no connection until the first claim."""

    def __init__(self, db) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._conn = None
        self._held: dict[str, str] = {}  # stream -> the claim key of the index this process reads it through
        self._checked = 0.0
        #: times the claims were taken again after their connection was lost
        self.renewed = 0

    def claim(self, stream: str, index: str) -> None:
        """Claim ``index`` as the one this process reads ``stream`` through (idempotent);
        the claim on the stream's previous index, if another, ends (the process no
        longer reads through it: its rows were clustered since)."""
        key = claim_key(self.db.schema, index)
        with self._lock:
            old = self._held.get(stream)
            if old == key and self._conn is not None:
                return
            self._held[stream] = key
            self._take([key])
            if old is not None and old != key and old not in self._held.values():
                self._release(old)

    def streams(self) -> list[str]:
        """The streams this process claims an index of."""
        with self._lock:
            return sorted(self._held)

    def keep_alive(self, every: float = KEEP_ALIVE_SECONDS) -> bool:
        """Check the claims' connection at most every ``every`` seconds, and take the
        claims again on a new one if the server lost it. True when it renewed them."""
        with self._lock:
            if not self._held or time.monotonic() - self._checked < every:
                return False
            self._checked = time.monotonic()
            try:
                with self._conn.cursor() as cur:
                    cur.execute("SELECT 1")
                return False
            except Exception as exc:  # closed, or the server restarted: the locks went with it
                log.warning("archive: the connection holding this process's BRIN index claims was lost (%s); "
                            "taking them again", " ".join(f"{exc}".split()))
                self._drop_conn()
            self._take(sorted(set(self._held.values())))
            self.renewed += 1
            return True

    def close(self) -> None:
        """End every claim (the connection closes, and its session's locks with it)."""
        with self._lock:
            self._held.clear()
            if self._conn is not None:
                # at once: the server would see the closed socket a moment later; a
                # connection already gone took the claims with it
                with suppress(Exception), self._conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock_all()")
            self._drop_conn()

    def _take(self, keys: list[str]) -> None:
        """Take ``keys`` on the claims' connection; on a new one, every held key (a new
        session holds nothing yet). A connection that fails is replaced once."""
        while True:
            fresh = self._conn is None
            if fresh:
                self._conn = self.db.connect()
                self._conn.autocommit = True
            try:
                with self._conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_lock_shared(hashtextextended(k, 0)) FROM unnest(%s::text[]) AS k",
                                (sorted(set(self._held.values())) if fresh else keys,))
                self._checked = time.monotonic()
                return
            except Exception:
                self._drop_conn()
                if fresh:
                    raise

    def _release(self, key: str) -> None:
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock_shared(hashtextextended(%s, 0))", (key,))
        except Exception:  # the connection is gone, and the claim with it; the others are taken again later
            self._drop_conn()

    def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # already broken
                conn.close()
