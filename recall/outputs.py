"""Where recall outputs go: an in-process publish/subscribe bus and the stored outputs.

Every :class:`~recall.api.Output` a recall operator emits (new tuples, revisions and
the manager's boundary tuples, M 4.6) is *published* (docs/ARCHITECTURE.md): the API's
live update stream and the console subscribe to a :class:`Bus`, and a
:class:`StoredOutputs` keeps them in PostgreSQL (``moirae_recall_outputs``) for
``GET /api/events/{eid}``.

Neither may slow the Recall Manager down:

- A :class:`Subscription` is a bounded queue. When it is full, ``publish`` drops the
  *oldest* queued output of that subscriber and counts it in ``dropped``; it never
  blocks and never affects other subscribers. A slow console therefore sees a gap
  (visible in its counter) rather than stalling history-queries.
- The results table is written by its own thread in batches (``execute_values``); the
  manager only appends to an in-memory queue. Nothing is dropped there: the table is
  the record. ``flush()`` waits until everything appended so far is committed.

>>> bus = Bus()
>>> sub = bus.subscribe(maxsize=2)
>>> for i in range(3):
...     bus.publish(i)
>>> list(sub.drain()), sub.dropped
([1, 2], 1)
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from psycopg2.extras import execute_values

from recall.api import Interval, Output, OutputKind

log = logging.getLogger(__name__)

TABLE = "moirae_recall_outputs"

DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id            bigserial PRIMARY KEY,
    operator      text NOT NULL,
    eid           text NOT NULL,
    event_ts      timestamptz NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('insert', 'update', 'delete', 'boundary')),
    seq           bigint NOT NULL,
    key           text NOT NULL,
    row           jsonb NOT NULL,
    covered_start timestamptz,
    covered_end   timestamptz,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {TABLE}_eid ON {TABLE} (eid, operator, seq);
"""


# -- the bus -------------------------------------------------------------------------
class Subscription:
    """A bounded, drop-oldest queue of published items, iterable until closed.

    ``get(timeout)`` returns the next item or None on timeout / once closed and empty;
    iterating yields items until :meth:`close` (or the bus closing). ``dropped`` counts
    items discarded because this subscriber fell ``maxsize`` behind.
    """

    def __init__(self, bus: Bus, maxsize: int, accept: Callable[[Any], bool] | None) -> None:
        if maxsize < 1:
            raise ValueError(f"subscription maxsize must be >= 1, got {maxsize!r}")
        self._bus = bus
        self._accept = accept
        self._items: collections.deque[Any] = collections.deque()
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0
        self.delivered = 0

    def _offer(self, item: Any) -> None:
        if self._accept is not None and not self._accept(item):
            return
        with self._cond:
            if self._closed:
                return
            if len(self._items) >= self._maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> Any | None:
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if self._items:
                self.delivered += 1
                return self._items.popleft()
            return None

    def drain(self) -> Iterator[Any]:
        """Everything queued now, without waiting."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self.delivered += len(items)
        return iter(items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
                self.delivered += 1
                item = self._items.popleft()
            yield item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._bus._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bus:
    """In-process publish/subscribe. ``publish`` never blocks (see the module doc)."""

    def __init__(self, default_maxsize: int = 10_000) -> None:
        self.default_maxsize = default_maxsize
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()
        self.published = 0

    def subscribe(self, maxsize: int | None = None, eid: str | None = None,
                  accept: Callable[[Any], bool] | None = None) -> Subscription:
        """A new subscription; ``eid`` keeps only outputs of that event, ``accept`` any
        other filter."""
        if eid is not None:
            inner = accept
            accept = lambda o: getattr(o, "eid", None) == eid and (inner is None or inner(o))  # noqa: E731
        sub = Subscription(self, maxsize or self.default_maxsize, accept)
        with self._lock:
            self._subs = [*self._subs, sub]
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = [s for s in self._subs if s is not sub]

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def publish(self, item: Any) -> None:
        self.published += 1
        for sub in self._subs:  # a copy-on-write list: no lock held while offering
            sub._offer(item)

    def close(self) -> None:
        for sub in list(self._subs):
            sub.close()


# -- the results table ---------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """A JSON-safe copy of ``value``: datetimes as ISO text, numpy scalars as Python
    numbers, NaN and infinities as null (PostgreSQL's jsonb rejects them).

    >>> jsonable({"a": float("nan"), "b": [1, Decimal("2.5")], "c": dt.date(2020, 1, 2)})
    {'a': None, 'b': [1, 2.5], 'c': '2020-01-02'}
    """
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return jsonable(float(value))
    if hasattr(value, "isoformat"):  # pandas Timestamp
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalar
        return jsonable(value.item())
    return str(value)


def _record(o: Output) -> tuple:
    cov = o.covered
    return (o.operator, o.eid, o.event_ts, o.kind.value, o.seq, o.key, json.dumps(jsonable(dict(o.row))),
            cov.start if cov else None, cov.end if cov else None)


class StoredOutputs:
    """The output stream as stored, in order, in ``moirae_recall_outputs``, appended to
    by a writer thread in batches (the applied result table of an output stream is
    :class:`recall.revision_ops.ResultTable`).

    ``db`` is an ``archive.pg.Database``. ``append`` is cheap and thread-safe; the writer
    commits up to ``batch_size`` outputs per statement, at least every
    ``flush_interval`` seconds. A failed write is retried (the batch stays queued) and
    counted in ``errors``; ``close`` flushes and stops the thread.
    """

    def __init__(self, db: Any, batch_size: int = 500, flush_interval: float = 0.2) -> None:
        self.db = db
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)
        self._pending: collections.deque[Output] = collections.deque()
        self._cond = threading.Condition()
        self._appended = 0
        self._written = 0
        self._closing = False
        self.errors = 0
        self.last_error: str | None = None
        self._conn = None
        self._thread = threading.Thread(target=self._run, name="moirae-recall-results", daemon=True)
        self._thread.start()

    def append(self, output: Output) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("StoredOutputs is closed")
            self._pending.append(output)
            self._appended += 1
            if len(self._pending) >= self.batch_size:
                self._cond.notify_all()

    __call__ = append  # so the table can be passed wherever an output callback goes

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every output appended so far is committed; False on timeout."""
        with self._cond:
            target = self._appended
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._written >= target, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._closing:
                    self._cond.wait(self.flush_interval)
                if not self._pending:
                    if self._closing:
                        break
                    continue
                batch = [self._pending[i] for i in range(min(self.batch_size, len(self._pending)))]
            try:
                self._write(batch)
            except Exception as exc:  # keep the batch and retry: the table is the record
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("writing %d recall outputs failed (will retry): %s", len(batch), exc)
                self._drop_conn()
                with self._cond:
                    if self._closing and self.errors > 3:
                        break
                    self._cond.wait(min(5.0, 0.1 * self.errors))
                continue
            with self._cond:
                for _ in batch:
                    self._pending.popleft()
                self._written += len(batch)
                self._cond.notify_all()
        self._drop_conn()

    def _write(self, batch: list[Output]) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = self.db.connect()
        with self._conn, self._conn.cursor() as cur:
            execute_values(
                cur,
                f"INSERT INTO {TABLE} (operator, eid, event_ts, kind, seq, key, row, covered_start,"
                " covered_end) VALUES %s",
                [_record(o) for o in batch],
                template="(%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)",
                page_size=self.batch_size,
            )

    def _drop_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None

    def read(self, eid: str | None = None, operator: str | None = None) -> list[Output]:
        """Stored outputs (after a :meth:`flush`), ordered by operator, eid and seq."""
        where, args = [], []
        if eid is not None:
            where.append("eid = %s")
            args.append(eid)
        if operator is not None:
            where.append("operator = %s")
            args.append(operator)
        sql = (f"SELECT operator, eid, event_ts, kind, seq, key, row, covered_start, covered_end FROM {TABLE}"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY operator, eid, seq, id")
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            rows = cur.fetchall()
        return [
            Output(operator=r[0], eid=r[1], event_ts=r[2], kind=OutputKind(r[3]), seq=r[4], key=r[5], row=r[6],
                   covered=Interval(r[7], r[8]) if r[7] is not None else None)
            for r in rows
        ]

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
