"""The read-only engine: :class:`~moirae.read.abc.EngineSurface` over the database of an
engine that does not run in this process, for ``moirae console``.

It reads the event log, the recall results table, the incident store, the chunk catalog
and the provenance graphs of event-queries (found by their tables,
``ank_<event>_vertex``). There is no Recall Manager: it is not steerable, its task list
is empty and steering raises :class:`~moirae.read.abc.EngineNotRunning` (HTTP 409). Its
bus is fed by :class:`DbTail`, which polls the event log, the results table and the
incident store for rows written by an engine in another process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ananke.store import GraphStore
from archive import Archiver, Database
from archive.schema import table_exists
from moirae.deploy.lifecycle import stored_monitors
from moirae.incidents.store import IncidentStore
from moirae.ingest.events import EventLog, EventRecord
from moirae.read import retract_view
from moirae.read.errors import EngineNotRunning
from moirae.rules.store import DispositionStore
from moirae.runtime.store import database_dsn
from recall.api import Interval, Output, OutputKind
from recall.outputs import TABLE, Bus, StoredOutputs

log = logging.getLogger(__name__)

#: ``detected_at`` is a transaction's start time, so a row may commit a little after
#: newer ones: the tail looks back this far and remembers which eids it published.
LOOKBACK = timedelta(seconds=30)


class ReadOnlyEngine:
    """The :class:`~moirae.read.abc.EngineSurface` over the database ``settings`` name,
    of an engine that does not run in this process (module doc)."""

    def __init__(self, settings, poll: float | None = 1.0) -> None:
        self.settings = settings
        self.db = Database(database_dsn(settings), schema=settings.postgres.schema)
        self._archiver = Archiver(self.db, settings.archive.settings())
        self._events = EventLog(self.db)
        # read only: this process records no events, so the store publishes nothing
        self._incidents = IncidentStore(self.db, publish=None, events=self._events)
        self._results = StoredOutputs(self.db)
        self._bus = Bus()
        self._dispositions: DispositionStore | None = None
        self._graphs: dict[str, GraphStore | None] = {}
        self.tail = DbTail(self.db, self._bus, poll, self._incidents) if poll else None
        if self.tail is not None:
            self.tail.start()

    # -- ReadSurface ----------------------------------------------------------------

    @property
    def events(self) -> EventLog:
        return self._events

    @property
    def results(self) -> StoredOutputs:
        return self._results

    @property
    def incidents(self) -> IncidentStore:
        return self._incidents

    @property
    def bus(self) -> Bus:
        return self._bus

    @property
    def archive(self) -> Archiver:
        return self._archiver

    @property
    def dispositions(self) -> DispositionStore:
        if self._dispositions is None:
            self._dispositions = DispositionStore(self.db)
        return self._dispositions

    def steerable(self) -> bool:
        return False

    def tasks(self, eid: str | None = None) -> list:
        return []

    def scheduler_state(self) -> None:
        return None

    def similarity_operators(self) -> set[str]:
        return set()

    def provenance_graph(self, event: str) -> GraphStore | None:
        """The provenance graph of event-query ``event``, if its tables
        (``ank_<event>_vertex``, ...) exist in the database."""
        if event not in self._graphs:
            self._graphs[event] = self._find_graph(event)
        return self._graphs[event]

    def _find_graph(self, event: str) -> GraphStore | None:
        try:
            store = GraphStore(self.db.connect, prefix=f"ank_{event}", borrow=self.db.connection)
        except ValueError:  # not a valid prefix: no graph
            return None
        with self.db.connection() as conn, conn.cursor() as cur:
            return store if table_exists(cur, store.v) else None

    def event_inputs(self, event: str) -> None:
        return None  # the event-queries are the running engine's, not in the database

    def status(self) -> dict[str, Any]:
        return self._archiver.status()

    def live_status(self) -> None:
        return None  # no live path in this process

    def monitors(self) -> list[dict[str, Any]]:
        """The deployed set as the engine last recorded it (no rates: it runs elsewhere)."""
        return stored_monitors(self.db)

    # -- SteerSurface: nothing to steer here -------------------------------------------

    def cancel(self, eid: str) -> int:
        raise EngineNotRunning(f"no engine is running in this process; cannot steer event {eid!r}")

    def cancel_many(self, eids: Iterable[str]) -> dict[str, int]:
        raise EngineNotRunning("no engine is running in this process; cannot steer")

    def accelerate(self, eid: str, tickets: int = 100) -> int:
        raise EngineNotRunning(f"no engine is running in this process; cannot steer event {eid!r}")

    def deploy_text(self, text: str) -> dict[str, Any]:
        raise EngineNotRunning("no engine is running in this process; cannot deploy a monitor")

    def undeploy_monitor(self, name: str, drop_archive: bool = False) -> dict[str, Any]:
        raise EngineNotRunning(f"no engine is running in this process; cannot undeploy monitor {name!r}")

    def retract(self, selection, reason: str, author: str, set_values=None, confirm: bool = False,
                audit=None) -> dict[str, Any]:
        raise EngineNotRunning("no engine is running in this process; cannot retract rows")

    def undo_retraction(self, rid: int, author: str, audit=None) -> dict[str, Any]:
        raise EngineNotRunning(f"no engine is running in this process; cannot undo retraction {rid!r}")

    # -- retractions and forward lookup, read from the database (moirae.read.retract_view) --

    def forward_lookup(self, selection) -> dict[str, Any]:
        return retract_view.lookup(self, selection)

    def alert_support(self, eid: str) -> dict[str, Any]:
        return retract_view.alert_support(self, eid)

    def retraction_list(self, limit: int = 100) -> list[dict[str, Any]]:
        return retract_view.retraction_list(self, limit)

    def retraction(self, rid: int) -> dict[str, Any]:
        return retract_view.retraction(self, rid)

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        if self.tail is not None:
            self.tail.stop()
        self._bus.close()
        self._results.close()
        self._archiver.close()

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
            cur.execute("SELECT event, eid, ts, attrs, context, surrounding, detected_at, monitor, version "
                        "FROM moirae_events "
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
            rec = EventRecord(*r[:4], context=r[4], surrounding=r[5], monitor=r[7], version=r[8])
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
