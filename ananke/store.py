"""The provenance graph in PostgreSQL (A 3, Definition 3.3).

:class:`GraphStore` is a :class:`~ananke.abc.GraphSink`: call it with a batch of graph
items and it inserts them in one transaction. Every table is keyed on the item's identity
(vertex kind + id, edge endpoints, labelled vertex), and inserts are ``ON CONFLICT DO
NOTHING``: a restarted engine that re-emits part of the graph (its ANK-1 state is gone, a
micro-batch is replayed) leaves the stored graph exactly as if each item came once. The
first emission's timestamp wins.

Queries: :meth:`GraphStore.sources_of` (backward: the source tuples of an alert) and
:meth:`GraphStore.alerts_of` (forward: the alerts of a source tuple, and whether it is
expired, i.e. whether that list is final).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime

from ananke.errors import AnankeError, BadPrefix
from ananke.ids import jsonable
from ananke.items import Edge, GraphItem, Label, SinkVertex, SourceVertex

_PREFIX_RE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class ForwardAnswer:
    """The alerts a source tuple contributed to so far, and whether that is final."""

    source_id: int
    alerts: tuple[tuple[str, int, datetime], ...]  # (sink, sink id, sink tuple time)
    expired: bool


_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def _jsonb_safe(obj):
    """``obj`` with every NUL and unpaired surrogate in its strings spelled as an escape
    (``\\u0000``): PostgreSQL's jsonb holds neither, and a sink tuple may carry one."""
    if isinstance(obj, str):
        return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", obj)
    if isinstance(obj, dict):
        return {_jsonb_safe(k): _jsonb_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonb_safe(v) for v in obj]
    return obj


class GraphStore:
    """Vertex / edge / label tables under ``prefix`` (default ``ank``).

    ``connect`` is a zero-argument callable returning a new psycopg2 connection (e.g.
    ``archive.pg.Database(...).connect``); the store closes what it opens: writes keep
    one until :meth:`close`. ``borrow``, if given, is a zero-argument callable returning
    a context manager that lends a connection (e.g. ``archive.pg.Database(...).connection``,
    a pool): queries then borrow one instead of opening a short-lived connection each,
    which on PostgreSQL is a new server process per query (the console's provenance
    lookups).
    """

    def __init__(self, connect: Callable[[], object], prefix: str = "ank",
                 borrow: Callable[[], AbstractContextManager] | None = None) -> None:
        if not _PREFIX_RE.match(prefix):
            raise BadPrefix(f"table prefix must be a lower-case identifier, got {prefix!r}")
        self.connect = connect
        self.borrow = borrow
        self.v, self.e, self.lab = f"{prefix}_vertex", f"{prefix}_edge", f"{prefix}_label"
        self._conn = None
        self._lock = threading.Lock()

    def create(self) -> GraphStore:
        """Create the tables if missing; return self."""
        self._run([
            f"""CREATE TABLE IF NOT EXISTS {self.v} (
                kind text NOT NULL CHECK (kind IN ('source', 'sink')), id bigint NOT NULL,
                sink text, tuple_ts timestamptz NOT NULL, payload jsonb, ts timestamptz NOT NULL,
                PRIMARY KEY (kind, id))""",
            f"""CREATE TABLE IF NOT EXISTS {self.e} (
                source_id bigint NOT NULL, sink_id bigint NOT NULL, ts timestamptz NOT NULL,
                PRIMARY KEY (source_id, sink_id))""",
            f"CREATE INDEX IF NOT EXISTS {self.e}_sink ON {self.e} (sink_id)",
            f"""CREATE TABLE IF NOT EXISTS {self.lab} (
                kind text NOT NULL, vertex_id bigint NOT NULL, ts timestamptz NOT NULL,
                PRIMARY KEY (kind, vertex_id))""",
        ])
        return self

    def _run(self, statements: Sequence[str]) -> None:
        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def __call__(self, items: Sequence[GraphItem]) -> None:
        """Insert a batch of graph items, idempotently, in one transaction.

        Source vertices, edges and labels go as one ``INSERT .. SELECT FROM unnest(..)``
        each, their columns bound as three array parameters: one statement per table
        and batch, where a ``VALUES`` list would make PostgreSQL parse every row. A
        batch whose connection broke (the server restarted) is written again on a new
        one: its rows are keyed, so a commit that did reach the server adds nothing."""
        rows = _columns(items)
        if not any(rows.values()):
            return
        with self._lock:
            for attempt in (0, 1):
                conn = self._writer()
                try:
                    with conn.cursor() as cur:
                        self._insert(cur, rows)
                    conn.commit()
                    return
                except BaseException:
                    if not conn.closed:
                        conn.rollback()
                        raise
                    self._conn = None
                    if attempt:
                        raise

    def _insert(self, cur, rows: dict[str, list]) -> None:
        from psycopg2.extras import execute_values

        if rows["sinks"]:  # a few per batch, each with its payload
            execute_values(cur, f"INSERT INTO {self.v} (kind, id, sink, tuple_ts, payload, ts) VALUES %s "
                                "ON CONFLICT DO NOTHING", rows["sinks"])
        if rows["sources"]:
            ids, tts, ts = zip(*rows["sources"], strict=True)
            cur.execute(f"INSERT INTO {self.v} (kind, id, tuple_ts, ts) SELECT 'source', i, t, w "
                        "FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS u(i, t, w) "
                        "ON CONFLICT DO NOTHING", (_ints(ids), _times(tts), _times(ts)))
        if rows["edges"]:
            src, snk, ts = zip(*rows["edges"], strict=True)
            cur.execute(f"INSERT INTO {self.e} (source_id, sink_id, ts) SELECT * "
                        "FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) ON CONFLICT DO NOTHING",
                        (_ints(src), _ints(snk), _times(ts)))
        if rows["labels"]:
            kinds, ids, ts = zip(*rows["labels"], strict=True)
            cur.execute(f"INSERT INTO {self.lab} (kind, vertex_id, ts) SELECT * "
                        "FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[]) ON CONFLICT DO NOTHING",
                        (_words(kinds), _ints(ids), _times(ts)))

    def _writer(self):
        """The store's write connection: opened on first use, kept (one per event-query,
        not one per micro-batch: each new connection is a new server process)."""
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        """Close the write connection (if open). The store opens it again if used."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.close()

    @contextmanager
    def _reading(self):
        """A connection for queries: borrowed when the store was given ``borrow``, else
        opened here and closed afterwards."""
        if self.borrow is not None:
            with self.borrow() as conn:
                yield conn
            return
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    def _query(self, sql: str, params: tuple, conn=None) -> list[tuple]:
        if conn is None:
            with self._reading() as conn:
                return self._query(sql, params, conn)
        with conn.cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        if not conn.autocommit:
            conn.rollback()  # end the read's transaction: an idle one would hold back vacuum
        return rows

    def sources_of(self, sink_id: int) -> list[tuple[int, datetime]]:
        """Backward: the (source id, event time) pairs that contributed to sink tuple ``sink_id``."""
        return [(r[0], r[1]) for r in self._query(
            f"SELECT v.id, v.tuple_ts FROM {self.e} e JOIN {self.v} v ON v.kind = 'source' AND v.id = e.source_id "
            "WHERE e.sink_id = %s ORDER BY v.tuple_ts, v.id", (sink_id,))]

    def alerts_of(self, source_id: int) -> ForwardAnswer:
        """Forward: the sink tuples ``source_id`` contributed to, and whether it is expired."""
        with self._reading() as conn:
            rows = self._query(
                f"SELECT v.sink, v.id, v.tuple_ts FROM {self.e} e JOIN {self.v} v ON v.kind = 'sink' "
                "AND v.id = e.sink_id WHERE e.source_id = %s ORDER BY v.tuple_ts, v.id", (source_id,), conn)
            expired = bool(self._query(f"SELECT 1 FROM {self.lab} WHERE kind = 'source' AND vertex_id = %s",
                                       (source_id,), conn))
        return ForwardAnswer(source_id, tuple((r[0], r[1], r[2]) for r in rows), expired)

    def counts(self) -> dict[str, int]:
        """Rows per table: source / sink vertices, edges, labels."""
        (src, snk, edges, labels), = self._query(
            f"SELECT (SELECT count(*) FROM {self.v} WHERE kind = 'source'), "
            f"(SELECT count(*) FROM {self.v} WHERE kind = 'sink'), (SELECT count(*) FROM {self.e}), "
            f"(SELECT count(*) FROM {self.lab})", ())
        return {"source": src, "sink": snk, "edge": edges, "label": labels}

    def keys(self) -> set[tuple]:
        """Every stored item as :func:`~ananke.items.graph_key` would key it."""
        out: set[tuple] = set()
        with self._reading() as conn:
            for kind, vid, sink, tts in self._query(f"SELECT kind, id, sink, tuple_ts FROM {self.v}", (), conn):
                out.add(("source", vid, tts) if kind == "source" else ("sink", sink, vid, tts))
            out.update(("edge", s, k) for s, k in self._query(f"SELECT source_id, sink_id FROM {self.e}", (), conn))
            out.update(("label", k, v) for k, v in self._query(f"SELECT kind, vertex_id FROM {self.lab}", (), conn))
        return out


def _columns(items: Sequence[GraphItem]) -> dict[str, list]:
    """Graph items as rows per kind (sink vertices, source vertices, edges, labels)."""
    out: dict[str, list] = {"sinks": [], "sources": [], "edges": [], "labels": []}
    for it in items:
        if isinstance(it, SourceVertex):
            out["sources"].append((it.id, it.tuple_ts, it.ts))
        elif isinstance(it, SinkVertex):
            out["sinks"].append(("sink", it.id, it.sink, it.tuple_ts,
                                 json.dumps(_jsonb_safe(jsonable(it.payload)), default=str), it.ts))
        elif isinstance(it, Edge):
            out["edges"].append((it.source_id, it.sink_id, it.ts))
        elif isinstance(it, Label):
            out["labels"].append((it.vertex_kind, it.vertex_id, it.ts))
        else:
            raise AnankeError(f"not a graph item: {it!r}")
    return out


def _ints(values) -> str:
    """A PostgreSQL array literal of integers, bound as one parameter.

    >>> _ints([1, -2, 3])
    '{1,-2,3}'
    """
    return "{" + ",".join(map(str, map(int, values))) + "}"


def _times(values) -> str:
    """A PostgreSQL array literal of time-zone-aware datetimes (ISO 8601, offset kept).

    >>> from datetime import UTC, datetime
    >>> _times([datetime(2024, 1, 1, 8, 0, 0, 5, tzinfo=UTC)])
    '{2024-01-01T08:00:00.000005+00:00}'
    """
    for v in values:
        if v.tzinfo is None:
            raise AnankeError(f"graph item time {v!r} has no time zone")
    return "{" + ",".join(v.isoformat() for v in values) + "}"


def _words(values) -> str:
    """A PostgreSQL array literal of plain lower-case words (the label kinds).

    >>> _words(["sink", "source"])
    '{sink,source}'
    """
    for v in values:
        if not _PREFIX_RE.match(v):
            raise AnankeError(f"graph label kind {v!r} is not a plain word")
    return "{" + ",".join(values) + "}"
