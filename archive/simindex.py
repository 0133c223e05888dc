"""The persisted similarity index of each chunk, and the vocabulary its term ids number
(M 3.5 "computed once and stored with the context").

Two side tables, next to the archive in the same schema:

- ``moirae_simindex (operator, chunk_id, streams, contexts, blob)``: one encoded
  :class:`~similarity.index.ChunkIndex` per (Similarity Recall, chunk); ``streams`` are the
  archived streams it was built from (events, contexts, surrounding);
- ``moirae_simvocab (operator, col, term)``: the operator's vocabulary, append-only, so a
  term id stored in a blob means the same term after a restart. New terms are written in
  the same transaction as the first blob that uses them.

:func:`invalidate` deletes the entries of the given chunks of a stream (retention,
re-materialization, late rows) and tells every in-process listener (the operators'
memory caches), so both copies of an index go exactly when its rows change.

:func:`ready` is the other direction: it tells every in-process :func:`listen_ready`
listener that chunks of a stream have just become final (demoted out of the present
tier, :func:`archive.tiers.demote`; or rewritten by a materialization), so their indexes
can be built and persisted ahead of any event (M 4.2 "Moirae can optionally index the
resulting materialized views"). It does no I/O and never raises.

The tables' DDL is :data:`archive.schema.SIMINDEX_DDL`; they are created on first use.
Everything here takes the archive's :class:`~archive.pg.Database`.
"""

from __future__ import annotations

import io
import logging
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from archive.schema import SIMINDEX_DDL, table_exists

_TEXT_OID = 25


def _field(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def copy_row(operator: str, chunk_id: int, streams: Sequence[str], contexts: int, blob: bytes) -> bytes:
    """One ``moirae_simindex`` row in PostgreSQL's binary COPY format (header, one tuple
    of five fields: text, int8, text[], int8, bytea, trailer)."""
    elems = b"".join(_field(s.encode()) for s in streams)
    array = struct.pack(">iiiii", 1, 0, _TEXT_OID, len(streams), 1) + elems
    fields = [operator.encode(), struct.pack(">q", chunk_id), array, struct.pack(">q", contexts), bytes(blob)]
    return (b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8 + struct.pack(">h", len(fields))
            + b"".join(_field(f) for f in fields) + b"\xff\xff")


log = logging.getLogger(__name__)
Listener = Callable[[str, Sequence[int]], None]
ReadyListener = Callable[[Any, str, Sequence[int]], None]
_listeners: list[Listener] = []
_ready: list[ReadyListener] = []
_lock = threading.Lock()


def _subscribe(listeners: list, fn: Callable, on: bool) -> None:
    with _lock:
        if on:
            listeners.append(fn)
        elif fn in listeners:
            listeners.remove(fn)


def listen(fn: Listener) -> None:
    """Call ``fn(stream, chunk_ids)`` whenever chunks of ``stream`` are invalidated."""
    _subscribe(_listeners, fn, True)


def unlisten(fn: Listener) -> None:
    _subscribe(_listeners, fn, False)


def listen_ready(fn: ReadyListener) -> None:
    """Call ``fn(archiver, stream, chunk_ids)`` whenever chunks of ``stream`` (ids on
    its own grid) become final (:func:`ready`)."""
    _subscribe(_ready, fn, True)


def unlisten_ready(fn: ReadyListener) -> None:
    _subscribe(_ready, fn, False)


def ready(arch, stream: str, chunk_ids: Iterable[int]) -> None:
    """Tell the :func:`listen_ready` listeners that ``stream``'s chunks ``chunk_ids`` of
    archive ``arch`` are final (sealed or materialized). Listeners only take note (e.g.
    queue a background build); one that raises is logged and the others still run."""
    ids = sorted({int(c) for c in chunk_ids})
    if not ids:
        return
    with _lock:
        listeners = list(_ready)
    for fn in listeners:
        try:
            fn(arch, stream, ids)
        except Exception as exc:  # a listener's bug must not fail a demotion or a materialization
            log.warning("similarity index listener %r failed on %s chunks %s: %s", fn, stream, ids, exc)


def ensure(cur) -> None:
    if not table_exists(cur, "moirae_simindex", "moirae_simvocab"):
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('moirae_simindex'))")
        cur.execute(SIMINDEX_DDL)


def invalidate(db, stream: str, chunk_ids: Iterable[int]) -> int:
    """Forget the index of ``stream``'s chunks ``chunk_ids`` (persisted in ``db`` and in
    memory); returns how many persisted entries were deleted."""
    ids = sorted({int(c) for c in chunk_ids})
    if not ids:
        return 0
    with _lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn(stream, ids)
    with db.connection(autocommit=False) as conn, conn.cursor() as cur:
        if not table_exists(cur, "moirae_simindex"):
            return 0
        cur.execute("DELETE FROM moirae_simindex WHERE chunk_id = ANY(%s) AND %s = ANY(streams)", (ids, stream))
        return cur.rowcount


class IndexStore:
    """Read and write one operator's persisted chunk indexes and vocabulary in ``db`` (a
    :class:`~archive.pg.Database`; the tables are created if missing)."""

    def __init__(self, db, operator: str) -> None:
        self.db, self.operator = db, operator
        with self._tx() as conn, conn.cursor() as cur:
            ensure(cur)
        self.saved_terms = 0  # vocabulary columns known to be persisted

    def _tx(self):
        return self.db.connection(autocommit=False)

    def load(self, chunk_id: int) -> bytes | None:
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("SELECT blob FROM moirae_simindex WHERE operator = %s AND chunk_id = %s",
                        (self.operator, int(chunk_id)))
            row = cur.fetchone()
        return None if row is None else bytes(row[0])

    def lookup(self, chunk_id: int, streams: Sequence[str], conn: Any = None) -> tuple[bool, bytes | None]:
        """``(sealed(chunk_id, streams), load(chunk_id))`` in one round trip, on ``conn``
        (e.g. a recall worker's) or a pooled connection."""
        sealed, blob = self._sealed_and("(SELECT blob FROM moirae_simindex WHERE operator = %s AND chunk_id = %s)",
                                        chunk_id, streams, conn)
        return bool(sealed), None if blob is None else bytes(blob)

    def state(self, chunk_id: int, streams: Sequence[str], conn: Any = None) -> tuple[bool, bool]:
        """``(sealed, persisted)`` of chunk ``chunk_id`` in one round trip, without
        fetching the blob (what a background build asks first)."""
        sealed, persisted = self._sealed_and("EXISTS (SELECT 1 FROM moirae_simindex WHERE operator = %s "
                                             "AND chunk_id = %s)", chunk_id, streams, conn)
        return bool(sealed), bool(persisted)

    def _sealed_and(self, what: str, chunk_id: int, streams: Sequence[str], conn: Any) -> tuple:
        """``(sealed, what)`` in one statement, on ``conn`` or a pooled connection."""
        sql = ("SELECT NOT EXISTS (SELECT 1 FROM moirae_chunks WHERE chunk_id = %s AND stream = ANY(%s) "
               f"AND tier = 'present' AND NOT dropped), {what}")
        args = (int(chunk_id), list(streams), self.operator, int(chunk_id))
        if conn is None:
            with self._tx() as own, own.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchone()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    def delete(self, chunk_id: int) -> None:
        """Forget this operator's entry of one chunk (a build that raced an invalidation)."""
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM moirae_simindex WHERE operator = %s AND chunk_id = %s",
                        (self.operator, int(chunk_id)))

    def save(self, chunk_id: int, streams: Sequence[str], contexts: int, blob: bytes, terms: Sequence[str]) -> None:
        """Store one chunk's blob; ``terms`` is the whole vocabulary it may use (the
        columns not yet persisted are appended first, in the same transaction)."""
        with self._tx() as conn, conn.cursor() as cur:
            # An index is derived data: if a crash loses this commit, the chunk is built again
            # on use. Not waiting for the WAL flush keeps a background build from idling on it.
            cur.execute("SET LOCAL synchronous_commit = off")
            new = list(terms[self.saved_terms:])
            if new:  # one statement for all new columns (a chunk may bring thousands of terms)
                cur.execute("INSERT INTO moirae_simvocab (operator, col, term) "
                            "SELECT %s, %s + n - 1, t FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) "
                            "ON CONFLICT (operator, col) DO NOTHING", (self.operator, self.saved_terms, new))
            # binary COPY sends the blob as it is (an INSERT parameter travels hex-escaped, twice its size)
            cur.execute("DELETE FROM moirae_simindex WHERE operator = %s AND chunk_id = %s",
                        (self.operator, int(chunk_id)))
            cur.copy_expert("COPY moirae_simindex (operator, chunk_id, streams, contexts, blob) FROM STDIN "
                            "WITH (FORMAT binary)",
                            io.BytesIO(copy_row(self.operator, int(chunk_id), list(streams), int(contexts), blob)))
        self.saved_terms = max(self.saved_terms, len(terms))

    def vocabulary(self) -> list[str]:
        """The persisted terms in column order (a gap means a broken table: refused)."""
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("SELECT col, term FROM moirae_simvocab WHERE operator = %s ORDER BY col", (self.operator,))
            rows = cur.fetchall()
        if any(c != i for i, (c, _) in enumerate(rows)):
            raise ValueError(f"similarity vocabulary of {self.operator!r} has a gap in its columns")
        self.saved_terms = len(rows)
        return [t for _, t in rows]

    def clear(self) -> None:
        """Drop every index and the vocabulary of this operator (they disagree with its statistics)."""
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM moirae_simindex WHERE operator = %s", (self.operator,))
            cur.execute("DELETE FROM moirae_simvocab WHERE operator = %s", (self.operator,))
        self.saved_terms = 0

    def chunk_ids(self) -> list[int]:
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("SELECT chunk_id FROM moirae_simindex WHERE operator = %s ORDER BY chunk_id", (self.operator,))
            return [int(r[0]) for r in cur.fetchall()]

    def sealed(self, chunk_id: int, streams: Sequence[str]) -> bool:
        """True when no stream of ``streams`` holds chunk ``chunk_id`` in the present tier."""
        with self._tx() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM moirae_chunks WHERE chunk_id = %s AND stream = ANY(%s) "
                        "AND tier = 'present' AND NOT dropped", (int(chunk_id), list(streams)))
            return cur.fetchone()[0] == 0
