"""The event log: every detected event, its context, and whether its recall is open.

``moirae_events`` is the durable record (one row per eid, inserted once, so a replayed
micro-batch never submits an event's recall twice); recent events are also kept in
memory for the API and the console.

An event's end (``recall_ended``, so a restart does not resume its recall) is written by
group commit on one kept connection: whoever finds no write under way commits every end
queued so far in one ``UPDATE ... WHERE eid = ANY(...)``, the others wait for that
commit. Inside :meth:`EventLog.deferred` a thread only queues its ends and commits them
all once on leaving, which is how cancelling a thousand events costs one commit, not a
thousand (a cancel storm, M 4.4). Either way :meth:`mark_ended` returns only once
the end is committed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from archive.validate import storable_json

log = logging.getLogger(__name__)

DDL = """
CREATE TABLE IF NOT EXISTS moirae_events (
    eid          text PRIMARY KEY,
    event        text NOT NULL,
    ts           timestamptz NOT NULL,
    attrs        jsonb NOT NULL,
    context      jsonb NOT NULL DEFAULT '[]',
    surrounding  jsonb NOT NULL DEFAULT '{}',
    detected_at  timestamptz NOT NULL DEFAULT now(),
    recall_ended boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS moirae_events_event_ts ON moirae_events (event, ts DESC);
ALTER TABLE moirae_events ADD COLUMN IF NOT EXISTS monitor text;
ALTER TABLE moirae_events ADD COLUMN IF NOT EXISTS version text;
"""
#: the columns an :class:`EventRecord` is read back from, in its fields' order
COLUMNS = "event, eid, ts, attrs, context, surrounding, monitor, version"


@dataclass
class EventRecord:
    event: str
    eid: str
    ts: datetime
    attrs: dict[str, Any]
    context: list[dict] = field(default_factory=list)
    surrounding: dict[str, list[dict]] = field(default_factory=dict)
    detected_mono: float = field(default_factory=time.monotonic)
    first_history_mono: float | None = None
    monitor: str | None = None  # the monitor that raised it, and that monitor's version (its digest)
    version: str | None = None

    @classmethod
    def from_row(cls, row) -> EventRecord:
        """From a row of :data:`COLUMNS` (monitor and version may be absent)."""
        return cls(*row[:4], context=row[4], surrounding=row[5],
                   monitor=row[6] if len(row) > 6 else None, version=row[7] if len(row) > 7 else None)

    def as_event(self) -> dict[str, Any]:
        """The mapping recall operators get: eid, ts, the attributes, the context."""
        return {"eid": self.eid, "ts": self.ts, **self.attrs, "context": self.context,
                "surrounding": self.surrounding}

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "eid": self.eid, "ts": self.ts.isoformat(), "attrs": _plain(self.attrs),
                "context": _plain(self.context), "surrounding": _plain(self.surrounding),
                "monitor": self.monitor, "version": self.version}


def _plain(obj):
    """JSON-able, with text jsonb cannot hold (a NUL) spelled as escapes."""
    return storable_json(json.loads(json.dumps(obj, default=str)))


class EventLog:
    def __init__(self, db, keep: int = 10_000) -> None:
        self.db = db
        self.keep = keep
        self._recent: OrderedDict[str, EventRecord] = OrderedDict()
        self._lock = threading.Lock()
        #: called with the newly recorded events of each ``add`` (e.g. the incident store)
        self.listeners: list = []
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)
        self._ended = _EndedWriter(db)
        self._local = threading.local()

    def add(self, records: list[EventRecord]) -> list[EventRecord]:
        """Record events; return those not recorded before (the ones to submit)."""
        if not records:
            return []
        new = []
        with self.db.connection() as conn, conn.cursor() as cur:
            for r in records:
                cur.execute("INSERT INTO moirae_events (eid, event, ts, attrs, context, surrounding, monitor, version) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (eid) DO NOTHING RETURNING eid",
                            (r.eid, r.event, r.ts, json.dumps(_plain(r.attrs)), json.dumps(_plain(r.context)),
                             json.dumps(_plain(r.surrounding)), r.monitor, r.version))
                if cur.fetchone() is not None:
                    new.append(r)
        with self._lock:
            for r in new:
                self._recent[r.eid] = r
            while len(self._recent) > self.keep:
                self._recent.popitem(last=False)
        for listener in self.listeners if new else ():
            try:
                listener(new)
            except Exception as exc:  # a listener never loses an event: the log is the record
                log.warning("event log: listener %r failed on %d event(s): %s", listener, len(new), exc)
        return new

    def get(self, eid: str) -> EventRecord | None:
        with self._lock:
            if eid in self._recent:
                return self._recent[eid]
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM moirae_events WHERE eid = %s", (eid,))
            row = cur.fetchone()
        return EventRecord.from_row(row) if row else None

    def known(self, eids: Iterable[str]) -> set[str]:
        """Those of ``eids`` the log holds (one query)."""
        eids = [str(e) for e in eids]
        with self._lock:
            found = {e for e in eids if e in self._recent}
        rest = [e for e in eids if e not in found]
        if rest:
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute("SELECT eid FROM moirae_events WHERE eid = ANY(%s)", (rest,))
                found.update(r[0] for r in cur.fetchall())
        return found

    def list(self, event: str | None = None, since: datetime | None = None, until: datetime | None = None,
             limit: int = 50, offset: int = 0) -> list[EventRecord]:
        where, args = ["true"], []
        for cond, val in (("event = %s", event), ("ts >= %s", since), ("ts < %s", until)):
            if val is not None:
                where.append(cond)
                args.append(val)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM moirae_events "
                        f"WHERE {' AND '.join(where)} ORDER BY ts DESC, eid LIMIT %s OFFSET %s", (*args, limit, offset))
            rows = cur.fetchall()
        return [EventRecord.from_row(r) for r in rows]

    def mark_ended(self, eid: str) -> None:
        """Record that ``eid``'s recall ended (a restart does not resume it)."""
        self.mark_ended_many((eid,))

    def mark_ended_many(self, eids: Iterable[str]) -> None:
        """Record the end of several events' recall in one commit; returns once it is
        committed, or at once (queued) inside this thread's :meth:`deferred` block."""
        ticket = self._ended.queue(eids)
        if ticket is None:
            return
        if getattr(self._local, "defer", 0):
            return
        self._ended.flush(ticket)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block this thread's :meth:`mark_ended` calls only queue; leaving
        it commits everything queued so far at once (also when the block raised)."""
        depth = getattr(self._local, "defer", 0)
        self._local.defer = depth + 1
        try:
            yield
        finally:
            self._local.defer = depth
            if depth == 0:
                self._ended.flush()

    def close(self) -> None:
        """Commit the queued ends and close the kept connection (idempotent)."""
        self._ended.close()

    def open_events(self) -> list[EventRecord]:
        """Events whose recall had not ended (to resume after a restart)."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM moirae_events WHERE NOT recall_ended ORDER BY ts")
            return [EventRecord.from_row(r) for r in cur.fetchall()]

    def note_history(self, eid: str) -> float | None:
        """Record the first history output of an event; return alert-to-history seconds."""
        with self._lock:
            r = self._recent.get(eid)
            if r is None or r.first_history_mono is not None:
                return None
            r.first_history_mono = time.monotonic()
            return r.first_history_mono - r.detected_mono


class _EndedWriter:
    """Group commit of ``recall_ended`` on one kept connection (see the module docstring)."""

    def __init__(self, db) -> None:
        self.db = db
        self._cond = threading.Condition()
        self._pending: dict[str, None] = {}
        self._queued = 0  # tickets handed out
        self._committed = 0  # every ticket up to this one is committed
        self._writing = False
        self._conn = None

    def queue(self, eids: Iterable[str]) -> int | None:
        batch = [str(e) for e in eids]
        if not batch:
            return None
        with self._cond:
            self._pending.update(dict.fromkeys(batch))
            self._queued += 1
            return self._queued

    def flush(self, ticket: int | None = None) -> None:
        """Return once ``ticket`` (default: every end queued so far) is committed."""
        with self._cond:
            target = self._queued if ticket is None else ticket
            while self._committed < target:
                if self._writing:
                    self._cond.wait()
                    continue
                self._writing = True
                batch, self._pending = list(self._pending), {}
                upto = self._queued
                ok = False
                self._cond.release()
                try:
                    if batch:
                        self.db.retry(lambda b=batch: self._write(b), "event log: recall ended",
                                      on_lost=self._drop_conn)
                    ok = True
                finally:
                    self._cond.acquire()
                    self._writing = False
                    if ok:
                        self._committed = max(self._committed, upto)
                    else:  # queued again: the next flush (this caller's or a waiter's) retries
                        self._pending = {**dict.fromkeys(batch), **self._pending}
                    self._cond.notify_all()

    def _write(self, eids: list[str]) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = self.db.connect()
            self._conn.autocommit = True
        with self._conn.cursor() as cur:
            cur.execute("UPDATE moirae_events SET recall_ended = true WHERE eid = ANY(%s) AND NOT recall_ended",
                        (eids,))

    def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._cond:
                while self._writing:
                    self._cond.wait()
                self._drop_conn()
