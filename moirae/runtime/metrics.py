"""The engine's own metrics, in Prometheus's text format (served at ``GET /metrics``).

One registry per process, :data:`REGISTRY`. The counters below are moved where things
happen (deliveries, receivers, server-sent-event clients); the rest is read from the
running engine when scraped, by the collector :mod:`moirae.engine.metrics` installs
with :func:`set_engine_collector` (micro-batches and lag per query, rows archived and
dead-lettered, the archive wait, recall tasks, time to first history, database errors
and retries).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

REGISTRY = CollectorRegistry(auto_describe=False)

ALERTS = Counter("moirae_alerts", "Alerts (detected events) per monitor (event-query)", ["monitor"],
                 registry=REGISTRY)
DELIVERIES = Counter("moirae_alert_deliveries", "Alert deliveries per target and outcome "
                     "(ok, retry: a failed try that is tried again, dead_letter: the last try failed)",
                     ["target", "outcome"], registry=REGISTRY)
DELIVERY_SECONDS = Histogram("moirae_alert_delivery_seconds", "From an alert's detection to its delivery",
                             ["kind"], registry=REGISTRY, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
RECEIVED = Counter("moirae_received_rows", "Rows taken in by the HTTP receivers", ["kind", "name"],
                   registry=REGISTRY)
RECEIVE_ERRORS = Counter("moirae_receive_errors", "Refused receiver requests", ["kind", "name"], registry=REGISTRY)
BATCH_SECONDS = Histogram("moirae_microbatch_duration_seconds", "Micro-batch durations per streaming query",
                          ["query"], registry=REGISTRY,
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
SSE_CLIENTS = Gauge("moirae_sse_clients", "Clients following GET /api/stream", registry=REGISTRY)
BOUNDARIES = Counter("moirae_recall_events_completed", "Events whose recall tasks have all ended (boundaries)",
                     registry=REGISTRY)

_lock = threading.Lock()
_engine_collector = None


def set_engine_collector(collector) -> None:
    """Make ``collector`` (or None) the one engine collector of :data:`REGISTRY`, in place
    of the previous engine's."""
    global _engine_collector
    with _lock:
        if _engine_collector is not None:
            try:
                REGISTRY.unregister(_engine_collector)
            except KeyError:
                pass
        _engine_collector = collector
        if collector is not None:
            REGISTRY.register(collector)


def clear_engine_collector(collector) -> None:
    """Remove ``collector`` if it is still the engine collector."""
    if _engine_collector is collector:
        set_engine_collector(None)


def exposition() -> tuple[bytes, str]:
    """The metrics as Prometheus text and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
