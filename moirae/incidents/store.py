"""Incidents: what an on-call engineer triages (M 3.3), persisted in PostgreSQL.

An event-query fires once per window while its condition lasts; consecutive events of
one key are one incident, by the pure rule of :mod:`similarity.incidents` (the id of an
incident is the eid of its first event, so Similarity Recall names the same incidents).
The :class:`IncidentStore` assigns live events as the engine records them (it listens
on the :class:`moirae.ingest.events.EventLog`), keeps per incident its status (``open``,
``acknowledged``, ``resolved``), start, last event, events, severity and the
resolution note with who recorded it and when, and survives restarts (the tracker's
open incidents are restored from the table).

**Severity** is the distance of the triggering value to the event's *norm*: a Recall
whose rows carry ``mean_<m>`` and ``sd_<m>`` (the paper's ``norm`` query, M fig. 2).
Each time the norm of an event is refined, the event's ``z = (value - mean) / sd`` is
recomputed; an incident's severity is the largest ``z`` of its events.

**Resolutions** recorded here are the incidents' resolutions: :meth:`IncidentStore.resolutions`
is the callback the engine hands to Similarity Recall, so future alerts' similar-incident
lists show them (closing the loop of M 3.3).

Every change is published on the bus as ``{"type": "incident", ...}`` (the API's SSE).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from moirae.incidents.errors import IncidentError, NoSuchIncident
from moirae.incidents.resolution_cache import ResolutionCache
from moirae.incidents.rules import rule_row
from recall.api import OutputKind
from similarity.incidents import IncidentRule, IncidentTracker, LiveIncidents

log = logging.getLogger(__name__)

STATUSES = ("open", "acknowledged", "resolved")
MAX_NOTE = 4000

DDL = """
CREATE TABLE IF NOT EXISTS moirae_incidents (
    id              text PRIMARY KEY,
    event           text NOT NULL,
    key             text NOT NULL,
    status          text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'acknowledged', 'resolved')),
    start_ts        timestamptz NOT NULL,
    last_ts         timestamptz NOT NULL,
    n_events        integer NOT NULL DEFAULT 1,
    severity        double precision,
    resolution      text,
    acknowledged_by text,
    acknowledged_at timestamptz,
    resolved_by     text,
    resolved_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS moirae_incidents_start ON moirae_incidents (start_ts DESC, id);
CREATE INDEX IF NOT EXISTS moirae_incidents_noted ON moirae_incidents (id) WHERE resolution <> '';
CREATE TABLE IF NOT EXISTS moirae_incident_events (
    eid      text PRIMARY KEY,
    incident text NOT NULL REFERENCES moirae_incidents (id),
    ts       timestamptz NOT NULL,
    value    double precision,
    z        double precision
);
CREATE INDEX IF NOT EXISTS moirae_incident_events_incident ON moirae_incident_events (incident, ts);
CREATE TABLE IF NOT EXISTS moirae_incident_rules (
    event    text PRIMARY KEY,
    keys     text[] NOT NULL,
    window_s double precision NOT NULL,
    gap_s    double precision
);
"""

#: how long a read-only store trusts its copy of the persisted rules before reading them again
RULES_TTL_S = 5.0

COLUMNS = ("id", "event", "key", "status", "start_ts", "last_ts", "n_events", "severity", "resolution",
           "acknowledged_by", "acknowledged_at", "resolved_by", "resolved_at", "updated_at")


@dataclass(frozen=True)
class IncidentConfig:
    """How one event type's events become incidents and how they are shown.

    ``rule``: keys and window (:class:`similarity.incidents.IncidentRule`). ``metric``:
    the event attribute holding the triggering value (``avg_bw``); ``threshold``: the
    event-query's threshold on it; ``series``: ``(stream, column)`` of the raw metric the
    console charts around an incident; ``norm``: the Recall giving mean and sd."""

    rule: IncidentRule
    metric: str | None = None
    threshold: float | None = None
    series: tuple[str, str] | None = None
    norm: str | None = None


def severity_label(z: float | None) -> str:
    """``unknown`` / ``minor`` (< 3 sd) / ``major`` (< 6 sd) / ``critical``.

    >>> [severity_label(z) for z in (None, 1.2, 4, 9.5)]
    ['unknown', 'minor', 'major', 'critical']
    """
    if z is None or not math.isfinite(z):
        return "unknown"
    return "minor" if z < 3 else "major" if z < 6 else "critical"


def norm_of(row: Mapping[str, Any], metric: str | None = None) -> tuple[str, float, float] | None:
    """``(m, mean, sd)`` from a norm row with ``mean_<m>`` and ``sd_<m>`` (the one
    ``metric`` ends with, when several), or None.

    >>> norm_of({"sid": "a", "mean_bw": 120.0, "sd_bw": 30.0, "n": 9}, "avg_bw")
    ('bw', 120.0, 30.0)
    >>> norm_of({"sid": "a", "n": 3}) is None
    True
    """
    found = [c[5:] for c in row if c.startswith("mean_") and f"sd_{c[5:]}" in row]
    if metric is not None:
        found = [m for m in found if metric == m or metric.endswith("_" + m)] or found
    for m in found:
        mean, sd = row.get(f"mean_{m}"), row.get(f"sd_{m}")
        if isinstance(mean, int | float) and isinstance(sd, int | float):
            return m, float(mean), float(sd)
    return None


def metric_of(attrs: Mapping[str, Any], m: str, metric: str | None = None) -> float | None:
    """The event's value of norm metric ``m``: ``metric`` if configured, else ``avg_<m>``,
    ``<m>`` or another ``*_<m>`` attribute."""
    names = [metric] if metric else [f"avg_{m}", m, *sorted(a for a in attrs if a.endswith("_" + m))]
    for name in names:
        v = attrs.get(name)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


class IncidentStore:
    """Incidents of an engine's events (see the module docstring). ``publish`` receives
    each changed incident's summary; ``events`` resolves an eid to its record."""

    def __init__(self, db, publish: Callable[[dict], None] | None = None, events=None) -> None:
        self.db = db
        self.publish = publish
        self.events = events
        self.configs: dict[str, IncidentConfig] = {}
        self._declared: set[str] = set()  # configured by the user (configure), not followed from the query
        self._followed: dict[str, IncidentRule] = {}  # read from each event-query's window (follow)
        self._persisted: dict[str, IncidentRule] = {}  # the rules in moirae_incident_rules, for other processes
        self._persisted_at = -math.inf
        self._live = LiveIncidents(lambda event, attrs: self.config(event, attrs).rule, reopen=self._reopen)
        self._lock = threading.Lock()
        # Similarity Recall asks once per chunk and task (moirae.incidents.resolution_cache)
        self.resolution_cache = ResolutionCache(self._lookup_resolutions, self._any_resolution)
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)

    # -- configuration ----------------------------------------------------------------

    def configure(self, event: str, keys: Iterable[str] | str | None = None, window: timedelta | None = None,
                  gap: timedelta | None = None, metric: str | None = None, threshold: float | None = None,
                  series: tuple[str, str] | None = None, norm: str | None = None) -> IncidentConfig:
        """Declare how ``event``'s events group and are shown (before its first event).
        ``keys``, ``window`` and ``gap`` left out are the event-query's own (its window
        operator's keys, size and slide, :mod:`moirae.incidents.rules`) when it has
        one, else no keys and five minutes."""
        followed = self._followed.get(event)
        if keys is None:
            keys = followed.keys if followed is not None else ()
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        if window is None and followed is not None:
            window, gap = followed.window, followed.gap if gap is None else gap
        rule = IncidentRule(keys, timedelta(minutes=5) if window is None else window, gap)
        cfg = IncidentConfig(rule, metric, threshold, None if series is None else (str(series[0]), str(series[1])),
                             norm)
        with self._lock:
            self.configs[event] = cfg
            self._declared.add(event)
            self._live.forget(event)
        self._persist(event, rule)
        return cfg

    def follow(self, event: str, rule: IncidentRule) -> IncidentConfig:
        """Group ``event``'s events by the rule read from its event-query
        (:func:`moirae.incidents.rules.rule_from_graph`), unless the user configured it;
        what :meth:`configure` leaves out is then taken from it."""
        with self._lock:
            self._followed[event] = rule
            if event not in self._declared:
                self.configs[event] = IncidentConfig(rule)
                self._live.forget(event)
            cfg = self.configs[event]
        if event not in self._declared:
            self._persist(event, rule)
        return cfg

    def _persist(self, event: str, rule: IncidentRule) -> None:
        row = rule_row(rule)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_incident_rules (event, keys, window_s, gap_s) "
                        "VALUES (%(e)s, %(k)s, %(w)s, %(g)s) ON CONFLICT (event) DO UPDATE "
                        "SET keys = EXCLUDED.keys, window_s = EXCLUDED.window_s, gap_s = EXCLUDED.gap_s",
                        {"e": event, "k": row["keys"], "w": row["window_s"], "g": row["gap_s"]})
        self._persisted[event] = rule

    def _persisted_rule(self, event: str) -> IncidentRule | None:
        """The rule the engine recorded for ``event`` (another process's, for a read-only
        store), read again at most every :data:`RULES_TTL_S` seconds when unknown."""
        if event not in self._persisted and time.monotonic() - self._persisted_at > RULES_TTL_S:
            self._persisted_at = time.monotonic()
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute("SELECT event, keys, window_s, gap_s FROM moirae_incident_rules")
                for ev, keys, w, g in cur.fetchall():
                    self._persisted[ev] = IncidentRule(tuple(keys), timedelta(seconds=w),
                                                       None if g is None else timedelta(seconds=g))
        return self._persisted.get(event)

    def config(self, event: str, attrs: Mapping[str, Any] | None = None) -> IncidentConfig:
        """The event type's configuration: configured or followed here, else the rule
        the engine recorded for it (a read-only store), else keyed by its text
        attributes, with 5-minute windows."""
        cfg = self.configs.get(event)
        if cfg is None:
            rule = self._persisted_rule(event)
            if rule is None:
                keys = tuple(sorted(k for k, v in (attrs or {}).items() if isinstance(v, str)))
                rule = IncidentRule(keys, timedelta(minutes=5))
            cfg = self.configs.setdefault(event, IncidentConfig(rule))
        return cfg

    def _reopen(self, event: str, tr: IncidentTracker) -> None:
        """A new live tracker of ``event`` (after a restart) reopens, per key, the latest
        incident that a coming detection can still join (the same horizon as
        :meth:`_close`), so memory after a restart is what it was before it."""
        with self.db.connection() as conn, conn.cursor() as cur:  # survive restarts
            cur.execute("SELECT DISTINCT ON (key) key, id, start_ts, last_ts, n_events FROM moirae_incidents "
                        "WHERE event = %(e)s AND last_ts >= (SELECT max(last_ts) FROM moirae_incidents "
                        "WHERE event = %(e)s) - %(h)s ORDER BY key, last_ts DESC",
                        {"e": event, "h": self._live.horizon(tr.rule)})
            for key, iid, start, last, n in cur.fetchall():
                tr.restore(key, iid, start, last, n)

    def _close(self, newest: dict[str, datetime]) -> None:
        """Forget, per event type, the keys whose incident no coming detection can join:
        those whose last detection is more than ``CLOSE_AFTER_STEPS`` steps behind the
        type's newest. Detections arrive in window-close order, so one more than a step
        behind the newest is not expected; the second step is margin. The store (the
        database) keeps them; only the tracker's memory is bounded, by the keys alive
        within two steps instead of every key ever seen."""
        for event, ts in newest.items():
            self._live.close(event, ts)

    def open_keys(self, event: str) -> int:
        """How many keys the event type's tracker holds open (memory, for status and tests)."""
        return self._live.open_count(event)

    # -- live assignment --------------------------------------------------------------

    def record(self, records: Iterable[Any]) -> list[str]:
        """Assign newly recorded events (``EventRecord``s, in time order) to incidents;
        returns the ids of the incidents changed. Called by the event log."""
        changed: list[str] = []
        newest: dict[str, datetime] = {}
        rows = []
        with self._lock:
            for r in sorted(records, key=lambda r: (r.ts, r.eid)):
                newest[r.event] = max(newest.get(r.event, r.ts), r.ts)
                cfg = self.config(r.event, r.attrs)
                a = self._live.assign(r.event, r.eid, r.attrs, r.ts)
                key = a.key
                if a.unkeyed is not None:
                    log.warning("incidents: event %s of %s not grouped: %s", r.eid, r.event, a.unkeyed)
                value = None if cfg.metric is None else metric_of(r.attrs, "", cfg.metric)
                rows.append((r, key, a.incident, value))
                changed.append(a.incident)
            self._close(newest)
        if rows:
            with self.db.connection() as conn, conn.cursor() as cur:  # one transaction for the batch
                for r, key, incident, value in rows:
                    cur.execute("INSERT INTO moirae_incidents (id, event, key, start_ts, last_ts, n_events) "
                                "VALUES (%s, %s, %s, %s, %s, 0) ON CONFLICT (id) DO NOTHING",
                                (incident, r.event, key, r.ts, r.ts))
                    cur.execute("INSERT INTO moirae_incident_events (eid, incident, ts, value) "
                                "VALUES (%s, %s, %s, %s) ON CONFLICT (eid) DO NOTHING RETURNING eid",
                                (r.eid, incident, r.ts, value))
                    if cur.fetchone() is not None:
                        # a new event reopens a resolved incident (its note is kept)
                        cur.execute("UPDATE moirae_incidents SET n_events = n_events + 1, "
                                    "start_ts = least(start_ts, %s), last_ts = greatest(last_ts, %s), "
                                    "status = CASE WHEN status = 'resolved' THEN 'open' ELSE status END, "
                                    "updated_at = now() WHERE id = %s", (r.ts, r.ts, incident))
            self.resolution_cache.invalidate(notes_only=True)  # new eids of (possibly noted) incidents, no new note
        if changed:  # the changed incidents' summaries, from their rows alone (not their events)
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT {', '.join(COLUMNS)} FROM moirae_incidents WHERE id = ANY(%s)",
                            (list(dict.fromkeys(changed)),))
                found = {row[0]: row for row in cur.fetchall()}
            for iid in dict.fromkeys(changed):
                if iid in found:
                    self._publish_summary(self._summary(found[iid]))
        return changed

    def on_output(self, out) -> None:
        """A recall output: when it refines an event's norm, recompute that event's z
        and its incident's severity (one statement, announced when it changed them)."""
        if out.kind not in (OutputKind.INSERT, OutputKind.UPDATE) or not isinstance(out.row, Mapping):
            return
        if norm_of(out.row) is None:  # not a norm row (a similar incident, say): nothing to look up
            return
        record = self.events.get(out.eid) if self.events is not None else None
        cfg = self.configs.get(record.event) if record is not None else None
        if cfg is not None and cfg.norm is not None and out.operator != cfg.norm:
            return
        norm = norm_of(out.row, None if cfg is None else cfg.metric)
        if norm is None or self.events is None:
            return
        rec = self.events.get(out.eid)
        if rec is None:
            return
        m, mean, sd = norm
        value = metric_of(rec.attrs, m, None if cfg is None else cfg.metric)
        if value is None or sd <= 0:
            return
        z = (value - mean) / sd
        # The incident's severity is computed in the same statement as the event's new z:
        # its subquery sees the events as they were before it, so the event's z is put in.
        # A norm that changes neither (the same refinement again) writes and announces nothing.
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(
                "WITH e AS (UPDATE moirae_incident_events SET z = %(z)s, value = %(v)s WHERE eid = %(eid)s "
                "AND (z IS DISTINCT FROM %(z)s OR value IS DISTINCT FROM %(v)s) RETURNING incident) "
                "UPDATE moirae_incidents i SET severity = (SELECT max(CASE WHEN x.eid = %(eid)s THEN %(z)s "
                "ELSE x.z END) FROM moirae_incident_events x WHERE x.incident = i.id), updated_at = now() "
                f"FROM e WHERE i.id = e.incident RETURNING {', '.join('i.' + c for c in COLUMNS)}",
                {"z": z, "v": value, "eid": out.eid})
            row = cur.fetchone()
        if row is not None:
            self._publish_summary(self._summary(row))

    # -- reading ----------------------------------------------------------------------

    def list(self, status: str | None = None, event: str | None = None, limit: int = 50,
             offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Incidents newest first (by start, then id), and how many match in all."""
        if status is not None and status not in STATUSES:
            raise IncidentError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        where = "(%(s)s::text IS NULL OR status = %(s)s) AND (%(e)s::text IS NULL OR event = %(e)s)"
        args = {"s": status, "e": event, "l": limit, "o": offset}
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(COLUMNS)} FROM moirae_incidents WHERE {where} "
                        "ORDER BY start_ts DESC, id DESC LIMIT %(l)s OFFSET %(o)s", args)
            rows = [self._summary(r) for r in cur.fetchall()]
            cur.execute(f"SELECT count(*) FROM moirae_incidents WHERE {where}", args)
            total = cur.fetchone()[0]
        return rows, total

    def get(self, incident: str) -> dict[str, Any]:
        """One incident with its events (eid, time, value, z) in time order."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(COLUMNS)} FROM moirae_incidents WHERE id = %s", (incident,))
            row = cur.fetchone()
            if row is None:
                raise NoSuchIncident(f"no incident {incident!r}")
            cur.execute("SELECT eid, ts, value, z FROM moirae_incident_events WHERE incident = %s ORDER BY ts, eid",
                        (incident,))
            events = [{"eid": e, "ts": t.isoformat(), "value": _num(v), "z": _num(z)} for e, t, v, z in cur.fetchall()]
        return {**self._summary(row), "events": events}

    def incident_of(self, eids: Iterable[str]) -> dict[str, str]:
        """``{eid: incident id}`` for the eids the store knows."""
        eids = [str(e) for e in eids]
        if not eids:
            return {}
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid, incident FROM moirae_incident_events WHERE eid = ANY(%s)", (eids,))
            return dict(cur.fetchall())

    def resolutions(self, incident_ids: Iterable[str]) -> dict[str, str]:
        """``{incident id: resolution note}`` of those resolved here with a note (the
        callback Similarity Recall gets). An id may also be any eid of the incident.
        Answers are remembered for a second (:mod:`moirae.incidents.resolution_cache`); this
        store's own writes clear them at once."""
        return self.resolution_cache.get(incident_ids)

    def _any_resolution(self) -> bool:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT EXISTS (SELECT 1 FROM moirae_incidents WHERE resolution <> '')")
            return bool(cur.fetchone()[0])

    def _lookup_resolutions(self, ids: list[str]) -> dict[str, str]:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT q.x, i.resolution FROM unnest(%s::text[]) AS q(x) "
                        "LEFT JOIN moirae_incident_events ie ON ie.eid = q.x "
                        "JOIN moirae_incidents i ON i.id = coalesce(ie.incident, q.x) "
                        "WHERE i.resolution IS NOT NULL AND i.resolution <> ''", (ids,))
            return dict(cur.fetchall())

    # -- actions ----------------------------------------------------------------------

    def acknowledge(self, incident: str, who: str | None = None) -> dict[str, Any]:
        """Mark acknowledged (a resolved incident stays resolved)."""
        return self._act(incident, "UPDATE moirae_incidents SET status = CASE WHEN status = 'resolved' "
                         "THEN status ELSE 'acknowledged' END, acknowledged_by = coalesce(acknowledged_by, %s), "
                         "acknowledged_at = coalesce(acknowledged_at, %s), updated_at = now() WHERE id = %s "
                         "RETURNING status", (who or "anonymous", datetime.now(UTC), incident))

    def resolve(self, incident: str, note: str, who: str | None = None) -> dict[str, Any]:
        """Mark resolved with ``note`` (how it was fixed): the incident's resolution."""
        if not isinstance(note, str) or not note.strip():
            raise IncidentError("a resolution note is required: say how the incident was resolved")
        if len(note) > MAX_NOTE or "\x00" in note:
            raise IncidentError(f"the resolution note must be at most {MAX_NOTE} characters, without NUL")
        now = datetime.now(UTC)
        return self._act(incident, "UPDATE moirae_incidents SET status = 'resolved', resolution = %s, "
                         "resolved_by = %s, resolved_at = %s, acknowledged_at = coalesce(acknowledged_at, %s), "
                         "updated_at = now() WHERE id = %s RETURNING status",
                         (note.strip(), who or "anonymous", now, now, incident))

    def _act(self, incident: str, sql: str, args: tuple) -> dict[str, Any]:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            if cur.fetchone() is None:
                raise NoSuchIncident(f"no incident {incident!r}")
        self.resolution_cache.invalidate()
        return self._announce(incident)

    def _announce(self, incident: str) -> dict[str, Any]:
        detail = self.get(incident)
        self._publish_summary({k: v for k, v in detail.items() if k != "events"})
        return detail

    def _publish_summary(self, summary: dict[str, Any]) -> None:
        if self.publish is not None:
            try:
                self.publish({"type": "incident", **summary})
            except Exception as exc:  # a closed bus never fails the engine
                log.debug("incidents: publish failed: %s", exc)

    def _summary(self, row) -> dict[str, Any]:
        d = dict(zip(COLUMNS, row, strict=True))
        start, last = d["start_ts"], d["last_ts"]
        cfg = self.configs.get(d["event"])
        rule = cfg.rule if cfg is not None else self._persisted_rule(d["event"])
        window = rule.window if rule is not None else timedelta(0)  # events carry their window's end
        return {"id": d["id"], "event": d["event"], "key": d["key"], "status": d["status"],
                "start": start.isoformat(), "last_event": last.isoformat(),
                "duration_s": (last - start + window).total_seconds(), "alerts": d["n_events"],
                "severity": _num(d["severity"]), "severity_label": severity_label(_num(d["severity"])),
                "resolution": d["resolution"],
                "acknowledged_by": d["acknowledged_by"], "acknowledged_at": _iso(d["acknowledged_at"]),
                "resolved_by": d["resolved_by"], "resolved_at": _iso(d["resolved_at"]),
                "updated_at": _iso(d["updated_at"])}


def _num(v: Any) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def _iso(v: datetime | None) -> str | None:
    return None if v is None else v.isoformat()
