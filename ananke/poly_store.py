"""Sink tuples' polynomials in PostgreSQL, beside the Ananke graph (A 3, H 5).

One set of tables for every event-query (prefix default ``ank_poly``):

- ``<prefix>_plan (sink, plan jsonb, ts)``: each event-query's
  :class:`~ananke.polynomial.PolyPlan`, written when its flow is built;
- ``<prefix> (sink, sink_id, tuple_ts, ids bigint[], vals bytea)``: one row per sink
  tuple, ``sink_id`` the same id as its vertex in the query's graph
  (``ank_<query>_vertex``), ``ids`` the polynomial's monomials flattened
  (:class:`~ananke.polynomial.Poly`) and ``vals`` its values (windows), packed.

A GIN index on ``ids`` makes the table the graph's source side across event-queries:
one lookup by source ids (a GIN probe per id) finds every sink tuple of every query a
source tuple fed (:meth:`PolyStore.affected`), the forward question of A 3 over all
queries at once. The index has no pending list (``fastupdate = off``): a lookup by many
ids (a retraction) would otherwise compare every pending entry with every id, and the
write it defers is one small batch of keys per micro-batch anyway. Lookups always go
through the index: a sequential scan compares each row's array with the whole id list. Inserts are keyed and ``ON CONFLICT DO NOTHING``, as the graph's are
(:mod:`ananke.store`): a replayed batch stores nothing twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import numpy as np

from ananke.errors import BadPrefix
from ananke.polynomial import Poly, PolyPlan
from ananke.store import _PREFIX_RE, _ints, _times


class PolyStore:
    """The polynomial tables under ``prefix``. ``connect`` / ``borrow`` as for
    :class:`~ananke.store.GraphStore` (a new connection; a lent one for reads)."""

    def __init__(self, connect: Callable[[], Any], prefix: str = "ank_poly",
                 borrow: Callable[[], AbstractContextManager] | None = None) -> None:
        if not _PREFIX_RE.match(prefix):
            raise BadPrefix(f"table prefix must be a lower-case identifier, got {prefix!r}")
        self.connect = connect
        self.borrow = borrow
        self.t, self.plan_t = prefix, f"{prefix}_plan"
        self._conn = None
        self._lock = threading.Lock()
        self._degree: dict[str, int] = {}

    def create(self) -> PolyStore:
        """Create the tables if missing; return self."""
        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"moirae_ddl:{self.t}",))
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.plan_t} (
                    sink text PRIMARY KEY, plan jsonb NOT NULL, ts timestamptz NOT NULL DEFAULT now())""")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.t} (
                    sink text NOT NULL, sink_id bigint NOT NULL, tuple_ts timestamptz NOT NULL,
                    ids bigint[] NOT NULL, vals bytea, PRIMARY KEY (sink, sink_id))""")
                cur.execute(f"CREATE INDEX IF NOT EXISTS {self.t}_ids ON {self.t} USING gin (ids) "
                            "WITH (fastupdate = off)")
                cur.execute(f"CREATE INDEX IF NOT EXISTS {self.t}_time ON {self.t} (sink, tuple_ts)")
                cur.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass(%s)",
                            (f"{self.t}_ids",))
                if "fastupdate=off" not in cur.fetchone()[0]:  # an index made before: merge its pending list
                    cur.execute(f"ALTER INDEX {self.t}_ids SET (fastupdate = off)")
                    cur.execute("SELECT gin_clean_pending_list(%s::regclass)", (f"{self.t}_ids",))
        finally:
            conn.close()
        return self

    def put_plan(self, plan: PolyPlan) -> None:
        """Record (or replace) an event-query's plan."""
        with self._writing() as cur:
            cur.execute(f"INSERT INTO {self.plan_t} (sink, plan) VALUES (%s, %s) ON CONFLICT (sink) DO UPDATE "
                        "SET plan = EXCLUDED.plan, ts = now()", (plan.sink, json.dumps(plan.to_dict())))
        self._degree[plan.sink] = plan.degree

    def plans(self) -> dict[str, PolyPlan]:
        """Every recorded plan, by sink (event-query) name."""
        out = {r[0]: PolyPlan.from_dict(r[1]) for r in self._query(f"SELECT sink, plan FROM {self.plan_t}", ())}
        self._degree.update({k: p.degree for k, p in out.items()})
        return out

    def put(self, sink: str, rows: Sequence[tuple[int, datetime, Poly]]) -> None:
        """Store sink tuples' polynomials ``(sink id, sink tuple time, poly)``, idempotently,
        in one statement: every polynomial's ids go as one flat array and its values as
        one byte string, each row taking its slice of them (:func:`packed`), so a batch
        costs a few parameters, not a literal per polynomial."""
        if not rows:
            return
        params = packed(rows)
        with self._writing() as cur:
            cur.execute(f"INSERT INTO {self.t} (sink, sink_id, tuple_ts, ids, vals) "
                        "SELECT %s, r.sid, r.ts, (%s::bigint[])[r.lo:r.hi], "
                        "CASE WHEN r.vn < 0 THEN NULL ELSE substring(%s::bytea FROM r.vo FOR r.vn) END "
                        "FROM unnest(%s::bigint[], %s::timestamptz[], %s::int[], %s::int[], %s::int[], %s::int[]) "
                        "AS r(sid, ts, lo, hi, vo, vn) ON CONFLICT DO NOTHING", (sink, *params))

    def add_terms(self, sink: str, terms: Mapping[int, Poly]) -> int:
        """Maintenance under insert (H 6): add to the stored polynomial of each sink tuple
        ``sink_id`` of ``sink`` the terms of ``terms[sink_id]`` (a window's late tuples,
        :func:`ananke.poly_maint.late_terms`) whose monomial it does not hold yet, in one
        transaction (the rows locked while merged: a concurrent add waits). Idempotent;
        returns how many terms were added. Sink tuples without a stored polynomial are
        left alone."""
        if not terms:
            return 0
        added = 0
        with self._writing() as cur:
            cur.execute(f"SELECT sink_id, ids, vals FROM {self.t} WHERE sink = %s AND sink_id = ANY(%s::bigint[]) "
                        "ORDER BY sink_id FOR UPDATE", (sink, _ints(sorted(terms))))
            for sid, ids, blob in cur.fetchall():
                old = Poly.from_bytes(ids, bytes(blob) if blob is not None else None, 1)
                new = terms[sid]
                fresh = ~np.isin(new.ids, old.ids)
                if not fresh.any():
                    continue
                merged = Poly(np.concatenate([old.ids, new.ids[fresh]]),
                              None if old.values is None or new.values is None
                              else np.vstack([old.values, new.values[fresh]]), 1)
                cur.execute(f"UPDATE {self.t} SET ids = %s::bigint[], vals = %s WHERE sink = %s AND sink_id = %s",
                            (_ints(merged.ids.tolist()), merged.to_bytes() if merged.values is not None else None,
                             sink, sid))
                added += int(fresh.sum())
        return added

    def between(self, sink: str, after: datetime | None, upto: datetime) -> list[tuple[int, datetime, Poly]]:
        """The sink tuples of ``sink`` whose time is in ``(after, upto]`` (``after`` None:
        every one up to ``upto``), with their polynomials, by time (an index on the time)."""
        rows = self._query(f"SELECT sink_id, tuple_ts, ids, vals FROM {self.t} WHERE sink = %s "
                           "AND tuple_ts > coalesce(%s::timestamptz, '-infinity') AND tuple_ts <= %s::timestamptz "
                           "ORDER BY tuple_ts, sink_id", (sink, after, upto))
        d = self._degree_of(sink)
        return [(r[0], r[1], Poly.from_bytes(r[2], bytes(r[3]) if r[3] is not None else None, d)) for r in rows]

    def _degree_of(self, sink: str) -> int:
        if sink not in self._degree:
            self.plans()
        return self._degree.get(sink, 1)

    def get(self, sink: str, sink_ids: Sequence[int]) -> dict[int, Poly]:
        """The polynomials of ``sink_ids`` of ``sink`` (those stored)."""
        rows = self._query(f"SELECT sink_id, ids, vals FROM {self.t} WHERE sink = %s AND sink_id = ANY(%s::bigint[])",
                           (sink, _ints(sink_ids)))
        d = self._degree_of(sink)
        return {r[0]: Poly.from_bytes(r[1], bytes(r[2]) if r[2] is not None else None, d) for r in rows}

    def affected(self, source_ids: Sequence[int]) -> list[tuple[str, int, datetime]]:
        """Forward, across every event-query: ``(sink, sink id, sink tuple time)`` of each
        sink tuple whose polynomial names one of ``source_ids``."""
        rows = self._query(self._forward("t.sink, t.sink_id, t.tuple_ts"), (_ints(sorted(set(source_ids))),),
                           by_index=True)
        return [(r[0], r[1], r[2]) for r in rows]

    def polys_of(self, source_ids: Sequence[int]) -> list[tuple[str, int, datetime, Poly]]:
        """:meth:`affected` with each sink tuple's polynomial."""
        rows = self._query(self._forward("t.sink, t.sink_id, t.tuple_ts, t.ids, t.vals"),
                           (_ints(sorted(set(source_ids))),), by_index=True)
        return [(r[0], r[1], r[2], Poly.from_bytes(r[3], bytes(r[4]) if r[4] is not None else None,
                                                    self._degree_of(r[0]))) for r in rows]

    def _forward(self, columns: str) -> str:
        """The forward lookup: one GIN probe per source id (``ids @> ARRAY[id]``), the
        sink tuples found once each. Its cost grows with the ids asked for, not with the
        table; one bitmap scan for ``ids && ARRAY[..]`` checks every id against every
        candidate entry, quadratic in a large retraction."""
        return (f"SELECT {columns} FROM {self.t} t JOIN (SELECT DISTINCT p.sink, p.sink_id "
                f"FROM unnest(%s::bigint[]) AS r(id) CROSS JOIN LATERAL (SELECT sink, sink_id FROM {self.t} "
                "WHERE ids @> ARRAY[r.id]) p) d ON d.sink = t.sink AND d.sink_id = t.sink_id "
                "ORDER BY t.tuple_ts, t.sink, t.sink_id")

    def drop(self, sink: str) -> int:
        """Forget an event-query's plan and polynomials (its monitor was retired, as its
        graph tables are dropped); return how many polynomials went."""
        with self._writing() as cur:
            cur.execute(f"DELETE FROM {self.t} WHERE sink = %s", (sink,))
            n = cur.rowcount
            cur.execute(f"DELETE FROM {self.plan_t} WHERE sink = %s", (sink,))
        self._degree.pop(sink, None)
        return int(n)

    def nbytes(self) -> int:
        """The tables' size on disk, indexes and TOAST included."""
        (n,), = self._query("SELECT coalesce(pg_total_relation_size(to_regclass(%s)), 0) "
                            "+ coalesce(pg_total_relation_size(to_regclass(%s)), 0)", (self.t, self.plan_t))
        return int(n)

    def count(self, sink: str | None = None) -> int:
        if sink is None:
            (n,), = self._query(f"SELECT count(*) FROM {self.t}", ())
        else:
            (n,), = self._query(f"SELECT count(*) FROM {self.t} WHERE sink = %s", (sink,))
        return int(n)

    @contextmanager
    def _writing(self):
        """A cursor on the store's kept write connection, committed at the end (a broken
        connection is dropped so the next write opens a new one). With ``borrow`` each
        write borrows a pooled connection instead: one statement, atomic on its own."""
        if self.borrow is not None:
            with self.borrow() as conn, conn.cursor() as cur:
                yield cur
            return
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = self.connect()
            conn = self._conn
            try:
                with conn.cursor() as cur:
                    yield cur
                conn.commit()
            except BaseException:
                if not conn.closed:
                    conn.rollback()
                else:
                    self._conn = None
                raise

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.close()

    @contextmanager
    def _reading(self):
        if self.borrow is not None:
            with self.borrow() as conn:
                yield conn
            return
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    def _query(self, sql: str, params: tuple, by_index: bool = False) -> list[tuple]:
        """Rows of one read; ``by_index``: with sequential scans off (in a transaction of
        its own), so an id lookup takes the GIN index however small the table is."""
        with self._reading() as conn:
            with conn.cursor() as cur:
                if by_index:
                    if conn.autocommit:
                        cur.execute("BEGIN")
                    cur.execute("SET LOCAL enable_seqscan = off")
                try:
                    cur.execute(sql, params)
                    rows = cur.fetchall()
                finally:
                    if by_index and conn.autocommit:
                        cur.execute("ROLLBACK")
            if not conn.autocommit:
                conn.rollback()
        return rows


def packed(rows: Sequence[tuple[int, datetime, Poly]]) -> tuple:
    """:meth:`PolyStore.put`'s parameters: every id as one array literal, every value
    blob as one byte string, then per row its id, time, ids slice ``[lo:hi]`` (1-based,
    inclusive) and value bytes (1-based offset, length; -1: NULL).

    >>> from datetime import UTC
    >>> t = datetime(2024, 1, 1, tzinfo=UTC)
    >>> ids, blob, sids, ts, lo, hi, vo, vn = packed([(9, t, Poly(np.array([4, 5]))), (8, t, Poly(np.array([6])))])
    >>> ids, blob, sids, lo, hi, vn
    ('{4,5,6}', b'', '{9,8}', '{1,3}', '{2,3}', '{-1,-1}')
    """
    lens = np.fromiter((len(p.ids) for _, _, p in rows), np.int64, len(rows))
    hi = np.cumsum(lens)
    ids = np.concatenate([p.ids for _, _, p in rows]) if len(rows) else np.empty(0, np.int64)
    blobs = [p.to_bytes() if p.values is not None else None for _, _, p in rows]
    vn = np.fromiter((-1 if b is None else len(b) for b in blobs), np.int64, len(rows))
    vo = np.cumsum(np.maximum(vn, 0)) - np.maximum(vn, 0) + 1
    return (_ints(ids.tolist()), b"".join(b for b in blobs if b is not None), _ints(int(sid) for sid, _, _ in rows),
            _times([ts for _, ts, _ in rows]), _ints((hi - lens + 1).tolist()), _ints(hi.tolist()),
            _ints(vo.tolist()), _ints(vn.tolist()))
