"""Sending one alert to one target: tries with backoff, then a dead letter.

:func:`post` makes one HTTP POST (the standard library's client: no extra dependency).
:class:`Sender` tries a delivery ``1 + retries`` times, waiting ``backoff``, then twice
that, and so on (capped at 60 s) between tries; a 2xx answer is success, anything else
(a refused connection, a timeout, a 4xx or 5xx) a failed try. After the last failed try
the delivery is written to the dead-letter table ``moirae_delivery_dead_letters`` with
the target, the payload, the number of tries and the last error, so nothing is dropped
silently. Webhook requests are signed when the target has a secret
(:mod:`moirae.delivery.signing`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from archive.schema import table_exists
from moirae.delivery.signing import sign
from moirae.delivery.targets import Target
from moirae.runtime.metrics import DELIVERIES

log = logging.getLogger(__name__)

DDL = """
CREATE TABLE IF NOT EXISTS moirae_delivery_dead_letters (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    target text NOT NULL,
    eid text,
    status text,
    payload jsonb NOT NULL,
    attempts integer NOT NULL,
    error text
)"""
MAX_WAIT = 60.0


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """One POST; returns the HTTP status (an HTTP error status is returned, not raised)."""
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "moirae", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only (targets.py)
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


class DeadLetters:
    """The dead-letter table of deliveries (created on first use)."""

    def __init__(self, db) -> None:
        self.db = db
        self._ready = False
        self._lock = threading.Lock()

    def add(self, target: Target, eid: str | None, status: str | None, payload: Any, attempts: int,
            error: str) -> None:
        with self._lock, self.db.connection() as conn, conn.cursor() as cur:
            if not self._ready:
                cur.execute(DDL)
                self._ready = True
            cur.execute("INSERT INTO moirae_delivery_dead_letters (target, eid, status, payload, attempts, error) "
                        "VALUES (%s, %s, %s, %s, %s, %s)",
                        (target.name, eid, status, json.dumps(payload, default=str), attempts, error[:2000]))

    def list(self, limit: int = 100) -> list[dict[str, Any]]:
        with self.db.connection() as conn, conn.cursor() as cur:
            if not table_exists(cur, "moirae_delivery_dead_letters"):
                return []
            cur.execute("SELECT id, at, target, eid, status, payload, attempts, error "
                        "FROM moirae_delivery_dead_letters ORDER BY id DESC LIMIT %s", (limit,))
            keys = ("id", "at", "target", "eid", "status", "payload", "attempts", "error")
            return [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]


class Sender:
    """Delivers payloads to targets with retries; dead-letters the last failure.
    ``sleep`` is injectable (a stop event's ``wait`` ends the waits at shutdown)."""

    def __init__(self, dead_letters: DeadLetters | None, sleep=time.sleep) -> None:
        self.dead_letters = dead_letters
        self.sleep = sleep

    def send(self, target: Target, url: str, payload: Any, eid: str | None = None,
             status: str | None = None) -> bool:
        body = json.dumps(payload, separators=(",", ":"), default=str).encode()
        error = ""
        tries = target.retries + 1
        for attempt in range(tries):
            headers = sign(target.secret, body) if target.secret else {}
            try:
                code = post(url, body, headers, target.timeout)
                if 200 <= code < 300:
                    DELIVERIES.labels(target.name, "ok").inc()
                    return True
                error = f"HTTP {code}"
            except (OSError, ValueError) as exc:  # refused, timed out, unreachable, bad URL
                error = f"{type(exc).__name__}: {exc}"
            if attempt + 1 < tries:
                DELIVERIES.labels(target.name, "retry").inc()
                if self.sleep(min(MAX_WAIT, target.backoff * 2**attempt)) is True:  # an Event's wait: stopping
                    break
        DELIVERIES.labels(target.name, "dead_letter").inc()
        log.warning("delivery to %s failed after %d tries (%s): dead-lettered", target.name, tries, error)
        if self.dead_letters is not None:
            try:
                self.dead_letters.add(target, eid, status, payload, tries, error)
            except Exception as exc:  # the database is away too: the log line above keeps the fact
                log.error("could not dead-letter the delivery to %s: %s", target.name, exc)
        return False
