"""The gate between the event log and the incident store, for alerts under a suppress rule.

An alert reaches the incident store (it joins or opens an incident, and so pages
on-call) only when its disposition lets it (:mod:`moirae.rules.norm`):

- **pending**, its norm not known yet: held, for at most ``hold`` seconds. The event is
  in the event log and the API at once, with disposition ``pending``; it has no
  incident yet. When ``hold`` passes without a verdict the alert goes through anyway
  (fail open), and the change says why.
- **raised** or **escalated** (provisional or final): handed to the incident store now.
- **suppressed** (provisional or final): kept out: no incident, no page. It stays in the
  event log, listed under ``?suppressed=true``.

Crossings. A revision of the norm that moves a suppressed alert out of the line hands it
to the incident store at that moment (it is un-suppressed, and the change says so). A
revision that moves an alert already handed over into the line makes it ``suppressed``
and says so, but its incident stays: a page already sent is not taken back, and the
incident is the on-call's to resolve. ``settle`` on the rule trades the time to the
first page against such late suppressions.

Event types without a suppress rule pass through untouched and at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class AlertGate:
    """Holds, forwards or keeps out alerts (module doc). ``forward`` is the incident
    store's ``record``; ``gated(event)`` says whether an event type has a suppress rule
    and for how long its alerts are held; ``on_forward(record, why)`` is told of each
    alert handed over; ``on_hold(records)`` of each alert taken into the gate."""

    def __init__(self, forward: Callable[[list], Any], gated: Callable[[str], float | None],
                 on_forward: Callable[[Any, str], None], on_hold: Callable[[list], None]) -> None:
        self.forward = forward
        self.gated = gated
        self.on_forward = on_forward
        self.on_hold = on_hold
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Any, float]] = {}  # eid -> (record, deadline), pending
        self._out: dict[str, Any] = {}  # eid -> record, suppressed (kept out; may be un-suppressed)
        self.forwarded = 0
        self.kept_out = 0

    def record(self, records: Iterable[Any]) -> list[str]:
        """The event log's listener: pass ungated alerts through, hold the others."""
        through, held = [], []
        now = time.monotonic()
        with self._lock:
            for r in records:
                hold = self.gated(r.event)
                if hold is None:
                    through.append(r)
                else:
                    self._held[r.eid] = (r, now + hold)
                    held.append(r)
        if held:
            self.on_hold(held)
        return self.forward(through) if through else []

    def decide(self, eid: str, disposition: str, record: Any = None, why: str = "") -> str | None:
        """The alert's disposition changed; returns what the gate did (``"forwarded"``,
        ``"kept out"``, ``"already forwarded"``) or None when it knows nothing of it.
        ``record`` is the alert's event record, for alerts the gate did not see (resumed
        after a restart)."""
        with self._lock:
            held = self._held.pop(eid, None)
            out = self._out.pop(eid, None)
            rec = held[0] if held is not None else out if out is not None else record
            if rec is None:
                return None
            if disposition == "pending":
                if held is not None:
                    self._held[eid] = held
                elif out is not None:
                    self._out[eid] = out
                return None
            if disposition == "suppressed":
                if held is None and out is None:
                    return "already forwarded"
                self._out[eid] = rec
                if held is not None:
                    self.kept_out += 1
                return "kept out"
            if held is None and out is None and record is None:
                return "already forwarded"
        self._send(rec, why or f"{disposition}")
        return "forwarded"

    def expire(self, now: float | None = None) -> int:
        """Forward the held alerts whose hold has passed; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [eid for eid, (_r, deadline) in self._held.items() if deadline <= now]
            recs = [self._held.pop(eid)[0] for eid in due]
        for r in recs:
            self._send(r, "held without a verdict until the hold passed: forwarded (fail open)")
        return len(recs)

    def release(self, event: str) -> int:
        """Forward every held alert of ``event`` (its last suppress rule is gone); returns how many."""
        with self._lock:
            due = [eid for eid, (r, _d) in self._held.items() if r.event == event]
            recs = [self._held.pop(eid)[0] for eid in due]
        for r in recs:
            self._send(r, "its suppress rule was removed while it was held: forwarded")
        return len(recs)

    def forget(self, eid: str) -> None:
        """The alert's disposition is final: the gate need not remember it."""
        with self._lock:
            self._out.pop(eid, None)

    def _send(self, rec: Any, why: str) -> None:
        try:
            self.forward([rec])
        except Exception as exc:
            log.warning("rules: alert %s not handed to the incident store: %s", rec.eid, exc)
            return
        self.forwarded += 1
        self.on_forward(rec, why)

    def knows(self, eid: str) -> bool:
        """Whether the alert is held or kept out here."""
        with self._lock:
            return eid in self._held or eid in self._out

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def kept(self) -> int:
        with self._lock:
            return len(self._out)
