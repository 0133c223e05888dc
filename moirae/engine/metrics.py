"""Metrics read from the running engine when ``GET /metrics`` is scraped
(:mod:`moirae.runtime.metrics` holds the registry and the counters moved as things happen).

:class:`EngineCollector` reads, at each scrape:

- per streaming query: every micro-batch finished since the last scrape (Spark keeps
  the recent ones in ``recentProgress``) into ``moirae_microbatch_duration_seconds``,
  their input rows, the event-time lag (now minus the query's watermark) and the
  backlog (the source's latest offset minus the batch's end, for sources with one
  numeric offset such as :mod:`moirae.sources.nats`);
- the archive: rows archived and rows dead-lettered per stream;
- the archive wait (:class:`~moirae.ingest.archive_waits.ArchiveWaits`): waits, seconds, timeouts;
- recall: tasks by state, and the time from each alert to its first history result;
- the database: errors (outages) and the retries made during them.

:class:`MetricsTap` follows the engine's bus: alerts per monitor, events whose recall completed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from moirae.runtime.metrics import ALERTS, BATCH_SECONDS, BOUNDARIES

log = logging.getLogger(__name__)


def _backlog(source: dict[str, Any]) -> float | None:
    def one(v):
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                return None
        if isinstance(v, dict) and len(v) == 1:
            (x,) = v.values()
            return x if isinstance(x, int | float) and not isinstance(x, bool) else None
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    latest, end = one(source.get("latestOffset")), one(source.get("endOffset"))
    return None if latest is None or end is None else max(0.0, float(latest) - float(end))


class EngineCollector:
    """A prometheus_client collector over one engine's parts (each a callable or object
    the engine hands over; none is the engine)."""

    def __init__(self, queries: Callable[[], list], archive_status: Callable[[], dict], waits,
                 tasks: Callable[[], list], latencies: Callable[[], list[float]], db_health) -> None:
        self.queries, self.archive_status, self.waits = queries, archive_status, waits
        self.tasks, self.latencies, self.db_health = tasks, latencies, db_health
        self._seen: dict[str, int] = {}  # query id -> last batch id observed
        self._lock = threading.Lock()

    def describe(self):
        return []

    def collect(self):
        yield from self._queries()
        yield from self._archive()
        yield from self._waits()
        yield from self._recall()
        yield from self._database()

    def _queries(self):
        lag = GaugeMetricFamily("moirae_query_lag_seconds", "Now minus the query's event-time watermark",
                                labels=["query"])
        backlog = GaugeMetricFamily("moirae_query_backlog", "Source offsets not yet read by the query "
                                    "(latest offset minus the last batch's end)", labels=["query"])
        rows = GaugeMetricFamily("moirae_query_input_rows_per_second", "Input rows per second of the last batch",
                                 labels=["query"])
        try:
            active = list(self.queries())
        except Exception as exc:  # a stopping session: report the rest
            log.debug("metrics: no streaming queries: %s", exc)
            active = []
        now = time.time()
        for q in active:
            try:
                name, qid, progress = q.name or str(q.id), str(q.id), q.recentProgress
            except Exception:  # a query stopping under us
                continue
            with self._lock:
                last = self._seen.get(qid, -1)
                for p in progress:
                    if p.get("batchId", -1) > last:
                        ms = (p.get("durationMs") or {}).get("triggerExecution")
                        if ms is not None:
                            BATCH_SECONDS.labels(name).observe(ms / 1000.0)
                        last = p["batchId"]
                self._seen[qid] = last
            if not progress:
                continue
            p = progress[-1]
            wm = (p.get("eventTime") or {}).get("watermark")
            if wm and not wm.startswith("1970-01-01"):
                lag.add_metric([name], max(0.0, now - datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp()))
            b = [x for x in (_backlog(s) for s in p.get("sources") or []) if x is not None]
            if b:
                backlog.add_metric([name], sum(b))
            rate = p.get("processedRowsPerSecond")
            if isinstance(rate, int | float):
                rows.add_metric([name], float(rate))
        yield from (lag, backlog, rows)

    def _archive(self):
        archived = CounterMetricFamily("moirae_archive_rows", "Rows archived per stream", labels=["stream"])
        dead = CounterMetricFamily("moirae_archive_dead_letters", "Rows dead-lettered per stream", labels=["stream"])
        late = CounterMetricFamily("moirae_archive_late_rows", "Late rows archived per stream", labels=["stream"])
        try:
            streams = self.archive_status().get("streams", {})
        except Exception as exc:  # the database is away: the database family says so
            log.debug("metrics: archive status failed: %s", exc)
            streams = {}
        for name, s in streams.items():
            archived.add_metric([name], float(s.get("rows", 0)))
            dead.add_metric([name], float(s.get("dead_letters", 0)))
            late.add_metric([name], float(s.get("late_rows", 0)))
        yield from (archived, dead, late)

    def _waits(self):
        w = self.waits.status()["archive_waits"]
        yield CounterMetricFamily("moirae_archive_waits", "Waits for the archive before a context",
                                  value=float(w.get("count", 0)))
        yield CounterMetricFamily("moirae_archive_wait_seconds", "Time spent waiting for the archive",
                                  value=float(w.get("seconds", 0.0)))
        yield CounterMetricFamily("moirae_archive_wait_timeouts", "Archive waits that timed out",
                                  value=float(w.get("timed_out", 0)))
        yield GaugeMetricFamily("moirae_archive_waits_in_progress", "Archive waits under way",
                                value=float(len(w.get("now", []))))

    def _recall(self):
        by_state: dict[str, int] = {}
        for t in self.tasks():
            state = getattr(t.state, "value", str(t.state))
            by_state[state] = by_state.get(state, 0) + 1
        g = GaugeMetricFamily("moirae_recall_tasks", "Recall tasks by state (open: runnable, running, suspended, "
                              "ending; ended ones while the manager keeps them)", labels=["state"])
        for state, n in sorted(by_state.items()):
            g.add_metric([state], float(n))
        yield g
        lat = list(self.latencies())
        yield SummaryMetricFamily("moirae_time_to_first_history_seconds", "From an alert to its first history result",
                                  count_value=len(lat), sum_value=float(sum(lat)))

    def _database(self):
        h = self.db_health
        with h._lock if hasattr(h, "_lock") else _NoLock():
            done = list(h.outages)
            cur = dict(h.current) if h.current else None
        outages = len(done) + (1 if cur else 0)
        retries = sum(int(o.get("retries", 0)) for o in done) + (int(cur.get("retries", 0)) if cur else 0)
        yield CounterMetricFamily("moirae_db_errors", "PostgreSQL outages (unreachable server) seen by this engine",
                                  value=float(outages))
        yield CounterMetricFamily("moirae_db_retries", "Connection retries made during PostgreSQL outages",
                                  value=float(retries))
        yield GaugeMetricFamily("moirae_db_unreachable", "1 while PostgreSQL is unreachable", value=1.0 if cur else 0.0)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class MetricsTap:
    """Follows the bus: a detected event counts for its monitor; a boundary, for
    completed recall."""

    def __init__(self, bus) -> None:
        self.bus = bus
        self._sub = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._sub = self.bus.subscribe(maxsize=100_000)
        self._thread = threading.Thread(target=self._run, name="moirae-metrics-tap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from recall.api import OutputKind

        sub = self._sub
        while sub is not None and not sub.closed:
            item = sub.get(timeout=0.5)
            if item is None:
                continue
            if isinstance(item, dict):
                if item.get("type") == "event":
                    ALERTS.labels(str(item.get("event"))).inc()
            elif getattr(item, "kind", None) is OutputKind.BOUNDARY:
                BOUNDARIES.inc()

    def stop(self) -> None:
        if self._sub is not None:
            self._sub.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._sub, self._thread = None, None


__all__ = ["EngineCollector", "MetricsTap"]
