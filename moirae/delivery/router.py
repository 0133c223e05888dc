"""Routing alerts out: per event-query (monitor), the targets its alerts go to.

:class:`AlertRouter` follows the engine's bus (docs/ARCHITECTURE.md, 3.2):

1. A new event of a routed event-query is held until its Similarity Recall has found
   something (a similarity row) or ended (its BOUNDARY), or ``wait_similar`` seconds
   have passed, whichever comes first; then it is described
   (:func:`moirae.delivery.summary.describe`: its incident and top similar past incidents
   with their resolutions) and sent, *firing*, to each target, on a pool of sender
   threads (a slow target delays no other).
2. While its similar incidents change (new similarity rows, revisions, its BOUNDARY),
   the alert is sent again to Alertmanager targets, at most every ``UPDATE_S`` seconds
   (Alertmanager updates the alert in place; webhooks get one message per state).
3. When the event's incident is resolved (``POST /api/incidents/{id}/resolve``), its
   alerts are sent *resolved*.
4. Firing Alertmanager alerts are posted again every ``resend`` seconds so Alertmanager
   does not expire them (its ``resolve_timeout``).
5. An event-query under a suppress rule (:mod:`moirae.rules`) is *gated*: its alerts are
   sent only once :meth:`AlertRouter.release` is called for them, which the rules do
   exactly when an alert is handed to the incident store (raised, escalated, or its
   norm's hold ran out). A suppressed alert is never sent: it pages no one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moirae.delivery.payloads import alertmanager_alert, moirae_json, slack
from moirae.delivery.send import DeadLetters, Sender
from moirae.delivery.summary import describe, similar_rows
from moirae.delivery.targets import Target, parse_targets
from moirae.runtime.metrics import DELIVERY_SECONDS

log = logging.getLogger(__name__)
MAX_HELD = 10_000
UPDATE_S = 0.5  # an Alertmanager alert is updated at most this often while its similar incidents change


@dataclass
class Held:
    """An event on its way out: when it was seen, and what was sent."""

    event: dict[str, Any]
    seen: float
    targets: list[Target]
    sent: dict[str, Any] | None = None
    similar_ready: bool = False
    ended: bool = False
    resolved: bool = False
    changed: bool = False  # similarity rows arrived after the last send
    last_update: float = 0.0
    last_resend: float = field(default_factory=time.monotonic)
    released: bool = True  # False while a rule may still suppress it (item 5 of the module doc)


class AlertRouter:
    """The alert routes of one engine, and the thread delivering them."""

    def __init__(self, bus, results, incidents, db, console_url: str = "", wait_similar: float = 1.0,
                 top: int = 3, workers: int = 4) -> None:
        self.bus, self.results, self.incidents = bus, results, incidents
        self.console_url = console_url.rstrip("/")
        self.wait_similar, self.top = wait_similar, top
        self.routes: dict[str, list[Target]] = {}
        self.dead_letters = DeadLetters(db)
        self._stop = threading.Event()
        self.sender = Sender(self.dead_letters, sleep=self._stop.wait)
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._sub = None
        self._thread: threading.Thread | None = None
        self.gated: Callable[[str], bool] = lambda event_query: False
        self._released: set[str] = set()  # eids released by the rules, maybe before their event came by

    # -- configuration -----------------------------------------------------------------

    def route(self, event_query: str, targets) -> list[Target]:
        """Send the alerts of ``event_query`` to ``targets`` (dicts or :class:`Target`;
        replaces its previous routes; an empty list removes them)."""
        parsed = parse_targets(targets, f"alerts of {event_query!r}")
        with self._lock:
            if parsed:
                self.routes[event_query] = parsed
            else:
                self.routes.pop(event_query, None)
        return parsed

    def release(self, page: dict[str, Any]) -> None:
        """A pager of :class:`moirae.rules.book.RuleBook`: the alert ``page["eid"]`` of a
        gated event-query may be sent (it was handed to the incident store)."""
        with self._lock:
            if len(self._released) >= MAX_HELD:
                self._released.clear()
            self._released.add(str(page["eid"]))

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="moirae-deliver")
        self._sub = self.bus.subscribe(maxsize=100_000)
        self._thread = threading.Thread(target=self._run, name="moirae-alert-router", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._sub is not None:
            self._sub.close()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)
        self._sub, self._thread, self._pool = None, None, None

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        from recall.api import OutputKind

        sub = self._sub
        while not self._stop.is_set() and sub is not None and not sub.closed:
            item = sub.get(timeout=0.1)
            try:
                if isinstance(item, dict):
                    self._on_dict(item)
                elif item is not None and getattr(item, "eid", None) in self._held:
                    h = self._held[item.eid]
                    if item.kind is OutputKind.BOUNDARY:
                        h.ended = h.similar_ready = True
                    elif similar_rows([item])[0] or item.kind is OutputKind.DELETE:
                        h.similar_ready = True
                        h.changed = h.sent is not None
                self._due()
            except Exception as exc:  # one bad item must not stop deliveries
                log.warning("alert routing: %s", exc, exc_info=True)

    def _on_dict(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "event":
            targets = self.routes.get(str(item.get("event")))
            if targets and item.get("eid") not in self._held:
                if len(self._held) >= MAX_HELD:
                    self._forget_oldest()
                self._held[str(item["eid"])] = Held(item, time.monotonic(), list(targets),
                                                    released=not self.gated(str(item.get("event"))))
        elif kind == "incident" and item.get("status") == "resolved":
            for eid, h in list(self._held.items()):
                if h.sent is not None and not h.resolved and h.sent.get("incident") == item.get("id"):
                    h.resolved = True
                    self._submit(h, eid, "resolved")

    def _due(self) -> None:
        now = time.monotonic()
        for eid, h in list(self._held.items()):
            if h.sent is None:
                if not h.released:
                    with self._lock:
                        h.released = eid in self._released
                        self._released.discard(eid)
                    if not h.released:
                        continue
                if h.similar_ready or now - h.seen >= self.wait_similar:
                    self._submit(h, eid, "firing")
            elif not h.resolved:
                if (h.ended and not h.sent.get("similar_complete")) or (h.changed and now - h.last_update >= UPDATE_S):
                    h.changed, h.last_update = False, now
                    self._submit(h, eid, "firing", only="alertmanager")
                elif now - h.last_resend >= min((t.resend for t in h.targets if t.kind == "alertmanager"),
                                                default=float("inf")):
                    h.last_resend = now
                    self._submit(h, eid, "firing", only="alertmanager", fresh=False)

    def _forget_oldest(self) -> None:
        for eid in list(self._held)[: max(1, len(self._held) // 10)]:
            self._held.pop(eid, None)

    def _submit(self, h: Held, eid: str, status: str, only: str | None = None, fresh: bool = True) -> None:
        if fresh or h.sent is None:
            alert = describe(eid, h.event, self.results, self.incidents, self.top)
            if h.ended:
                alert["similar_complete"] = True
            h.sent = alert
        if status == "firing" and fresh and self._resolved(h.sent.get("incident")):
            # its incident was resolved while it waited: it goes out resolved, not firing
            h.resolved, status = True, "resolved"
        alert = {**h.sent, "status": status}
        alert["console"] = self._console(alert)
        for t in h.targets:
            if only is None or t.kind == only:
                if self._pool is not None:
                    self._pool.submit(self._deliver, t, alert, h.seen)

    def _resolved(self, incident: str | None) -> bool:
        """Whether ``incident`` is resolved now (a later event would have reopened it)."""
        if not incident:
            return False
        try:
            return self.incidents.get(incident).get("status") == "resolved"
        except Exception:  # noqa: BLE001 - unknown incident, or the database away: not resolved
            return False

    def _console(self, alert: dict[str, Any]) -> str:
        base = self.console_url
        return f"{base}/#/incident/{alert.get('incident') or alert['eid']}" if base else ""

    def _deliver(self, target: Target, alert: dict[str, Any], seen: float) -> None:
        if target.console_url:
            alert = {**alert, "console": f"{target.console_url}/#/incident/{alert.get('incident') or alert['eid']}"}
        if target.kind == "alertmanager":
            item = alertmanager_alert(alert, target.labels, target.resend)
            ok = self.sender.send(target, f"{target.url}/api/v2/alerts", [item], alert["eid"], alert["status"])
        else:
            payload = slack(alert) if target.format == "slack" else moirae_json(alert)
            ok = self.sender.send(target, target.url, payload, alert["eid"], alert["status"])
        if ok:
            DELIVERY_SECONDS.labels(target.kind).observe(time.monotonic() - seen)

    def status(self) -> dict[str, Any]:
        return {"routes": {q: [t.name for t in ts] for q, ts in self.routes.items()},
                "held": len(self._held), "at": datetime.now(UTC).isoformat()}
