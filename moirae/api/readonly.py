"""A read-only view of an engine's database, for ``moirae console`` when no engine runs
in this process.

It offers what :mod:`moirae.views` reads from an engine: the event log, the recall
results table, the chunk catalog and the provenance graphs of event-queries (found by
their tables, ``ank_<event>_vertex``). There is no Recall Manager (``deploy.manager``
is None): progress is empty and steering answers 409. The live stream is fed by
:class:`DbTail`, which polls the event log and the results table for rows written by an
engine in another process and publishes them on ``deploy.bus``.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from ananke.store import GraphStore
from archive import Archiver, Database
from moirae.events import EventLog, EventRecord
from moirae.incidents import IncidentStore
from moirae.store import database_dsn
from recall.api import Interval, Output, OutputKind
from recall.outputs import TABLE, Bus, ResultsTable

log = logging.getLogger(__name__)

#: ``detected_at`` is a transaction's start time, so a row may commit a little after
#: newer ones: the tail looks back this far and remembers which eids it published.
LOOKBACK = timedelta(seconds=30)


class _Deploy:
    """The parts of the Deploy Manager a read-only view has."""

    manager = None

    def __init__(self, db: Database) -> None:
        self.db = db
        self.events = EventLog(db)
        self.incidents = IncidentStore(db, publish=None, events=self.events)  # read only: no events recorded here
        self.results = ResultsTable(db)
        self.bus = Bus()
        self.flows: dict = {}
        self.event_queries: dict = {}
        self._graphs: dict[str, GraphStore | None] = {}

    def graph(self, event: str) -> GraphStore | None:
        """The provenance graph of event-query ``event``, if its tables exist."""
        if event not in self._graphs:
            store = None
            try:
                store = GraphStore(self.db.connect, prefix=f"ank_{event}", borrow=self.db.connection)
            except ValueError:  # not a valid prefix: no graph
                pass
            if store is not None:
                with self.db.connection() as conn, conn.cursor() as cur:
                    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (store.v,))
                    if not cur.fetchone()[0]:
                        store = None
            self._graphs[event] = store
        return self._graphs[event]


class ReadOnlyEngine:
    """What the API needs of an engine, read from the database ``settings`` name."""

    def __init__(self, settings, poll: float | None = 1.0) -> None:
        self.settings = settings
        dsn = database_dsn(settings)
        self.db = Database(dsn, schema=settings.postgres.schema)
        self.archiver = Archiver(self.db, settings.archive.settings())
        self.deploy = _Deploy(self.db)
        self.started = False
        self.tail = DbTail(self.db, self.deploy.bus, poll, self.deploy.incidents) if poll else None
        if self.tail is not None:
            self.tail.start()

    def status(self):
        return self.archiver.status()

    def close(self) -> None:
        if self.tail is not None:
            self.tail.stop()
        self.deploy.bus.close()
        self.deploy.results.close()
        self.archiver.close()

    def __enter__(self) -> ReadOnlyEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DbTail:
    """Publishes events and recall outputs written to the database after it started
    (by an engine in another process) on ``bus``, polling every ``interval`` seconds,
    each once.
    Events come as ``{"type": "event", ...}`` dicts, outputs as
    :class:`~recall.api.Output` objects, as the engine's own bus carries them."""

    def __init__(self, db: Database, bus: Bus, interval: float = 1.0, incidents: IncidentStore | None = None) -> None:
        self.db = db
        self.bus = bus
        self.interval = interval
        self.incidents = incidents
        self._stop = threading.Event()
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}")
            self.last_id = cur.fetchone()[0]
            cur.execute("SELECT coalesce(max(detected_at), now()) FROM moirae_events")
            self.last_detected: datetime = cur.fetchone()[0]
            cur.execute("SELECT eid, detected_at FROM moirae_events WHERE detected_at >= %s",
                        (self.last_detected - LOOKBACK,))
            self._seen: dict[str, datetime] = dict(cur.fetchall())
            self.incidents_since: datetime | None = None
            if incidents is not None:  # its constructor made the table
                cur.execute("SELECT coalesce(max(updated_at), now()) FROM moirae_incidents")
                self.incidents_since = cur.fetchone()[0]
        self._thread = threading.Thread(target=self._run, name="moirae-console-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as exc:  # the database is away: retry next round
                log.warning("console: polling the database failed: %s", exc)

    def poll(self) -> int:
        """One round; returns how many items were published."""
        n = 0
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT event, eid, ts, attrs, context, surrounding, detected_at FROM moirae_events "
                        "WHERE detected_at >= %s ORDER BY detected_at, eid LIMIT 5000",
                        (self.last_detected - LOOKBACK,))
            events = cur.fetchall()
            cur.execute("SELECT id, operator, eid, event_ts, kind, seq, key, row, covered_start, covered_end "
                        f"FROM {TABLE} WHERE id > %s ORDER BY id LIMIT 5000", (self.last_id,))
            outputs = cur.fetchall()
            changed = []
            if self.incidents is not None:
                cur.execute("SELECT id, updated_at FROM moirae_incidents WHERE updated_at > %s ORDER BY updated_at",
                            (self.incidents_since,))
                changed = cur.fetchall()
        for r in events:
            if r[1] in self._seen:
                continue
            self._seen[r[1]] = r[6]
            self.last_detected = max(self.last_detected, r[6])
            rec = EventRecord(*r[:4], context=r[4], surrounding=r[5])
            self.bus.publish({"type": "event", **rec.to_json()})
            n += 1
        horizon = self.last_detected - LOOKBACK
        self._seen = {e: t for e, t in self._seen.items() if t >= horizon}
        for r in outputs:
            self.last_id = r[0]
            self.bus.publish(Output(operator=r[1], eid=r[2], event_ts=r[3], kind=OutputKind(r[4]), seq=r[5],
                                    key=r[6], row=r[7], covered=Interval(r[8], r[9]) if r[8] is not None else None))
            n += 1
        for iid, at in changed:  # incident updates, as the engine's store announces them
            self.incidents_since = max(self.incidents_since, at)
            summary = {k: v for k, v in self.incidents.get(iid).items() if k != "events"}
            self.bus.publish({"type": "incident", **summary})
            n += 1
        return n
