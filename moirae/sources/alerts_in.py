"""Alerts in: an Alertmanager-compatible webhook receiver as a source stream.

Alertmanager (or anything speaking its webhook format, version 4) posts notifications to
``POST /api/receive/alertmanager/<name>`` (:mod:`moirae.api.receivers_api`). Each alert of
a notification becomes one row of the source's inbox (:mod:`moirae.sources.inbox`), once
per ``(fingerprint, startsAt, status)``: Alertmanager repeats a group's alerts in every
notification, and only a change is a new row. Columns:

- ``ts``: when the alert started (firing) or ended (resolved);
- ``eid``: ``<fingerprint>-<startsAt in epoch ms>``, one id per firing of an alert, the
  same in its firing and its resolved row;
- ``status`` (``firing`` / ``resolved``), ``fingerprint``, ``starts_at``, ``ends_at``,
  ``generator_url``;
- one text column per label named in the ``labels`` option (default ``alertname``,
  ``severity``, ``instance``, ``job``), and ``labels`` / ``annotations``, the rest as JSON.

An event-query over it (``status = 'firing'``) turns the alerts Prometheus already fires
into Moirae events, which then get contexts, recall and similar past incidents as any
other (docs/ARCHITECTURE.md, 3.2); :func:`firing` is that query as a Spark function.
:func:`build` is the ``alertmanager`` source kind of monitor files.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from moirae.sources.errors import SourceError
from moirae.sources.inbox import Inbox, receiver_source

KIND = "alertmanager"
DEFAULT_LABELS = ("alertname", "severity", "instance", "job")
RESERVED = ("ts", "eid", "status", "fingerprint", "starts_at", "ends_at", "generator_url", "labels", "annotations")
MAX_SEEN = 100_000
_locks: dict[str, threading.Lock] = {}


#: the ``alertmanager`` source kind's options (``data_dir`` is filled in by the engine)
OPTIONS_SCHEMA = {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, "data_dir": {"type": "string"},
    "labels": {"type": ["string", "array"]}, "maxFilesPerTrigger": {"type": ["integer", "string"]}}}


class AlertPayloadError(SourceError, ValueError):
    """A notification that is not Alertmanager's webhook JSON, or a bad option."""


def parse_labels(value: Any) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_LABELS
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value) if s.strip()]
    for n in names:
        if n in RESERVED or not n.replace("_", "a").isalnum() or n[0].isdigit():
            raise AlertPayloadError(f"option 'labels': {n!r} cannot be a column")
    return tuple(dict.fromkeys(names))


def schema_ddl(labels: Sequence[str]) -> str:
    return ", ".join(["ts timestamp", "eid string", "status string", "fingerprint string",
                      "starts_at timestamp", "ends_at timestamp", "generator_url string",
                      *(f"`{n}` string" for n in labels), "labels string", "annotations string"])


def _time(text: Any, where: str) -> datetime | None:
    if text in (None, "") or str(text).startswith("0001-01-01"):
        return None
    try:
        t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise AlertPayloadError(f"{where}: not an RFC 3339 time: {text!r}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def parse_notification(body: Any) -> list[dict[str, Any]]:
    """The alerts of a webhook notification, each checked (the error names the alert's
    index and the field)."""
    if not isinstance(body, dict) or not isinstance(body.get("alerts"), list):
        raise AlertPayloadError("not an Alertmanager webhook notification: no 'alerts' list")
    out = []
    for i, a in enumerate(body["alerts"]):
        where = f"alerts[{i}]"
        if not isinstance(a, dict):
            raise AlertPayloadError(f"{where}: not an object")
        status = a.get("status", body.get("status"))
        if status not in ("firing", "resolved"):
            raise AlertPayloadError(f"{where}.status must be 'firing' or 'resolved', got {status!r}")
        labels, ann = a.get("labels") or {}, a.get("annotations") or {}
        if not isinstance(labels, dict) or not isinstance(ann, dict):
            raise AlertPayloadError(f"{where}: labels and annotations must be objects")
        starts = _time(a.get("startsAt"), f"{where}.startsAt")
        if starts is None:
            raise AlertPayloadError(f"{where}.startsAt is required")
        ends = _time(a.get("endsAt"), f"{where}.endsAt")
        fp = str(a.get("fingerprint") or _fingerprint(labels))
        out.append({"status": status, "labels": {str(k): str(v) for k, v in labels.items()},
                    "annotations": {str(k): str(v) for k, v in ann.items()}, "starts_at": starts, "ends_at": ends,
                    "fingerprint": fp, "generator_url": a.get("generatorURL")})
    return out


def _fingerprint(labels: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def to_table(alerts: list[dict[str, Any]], labels: Sequence[str]):
    import pyarrow as pa

    ts_t = pa.timestamp("us", tz="UTC")
    rows = []
    for a in alerts:
        eid = f"{a['fingerprint']}-{int(a['starts_at'].timestamp() * 1000)}"
        ts = a["starts_at"] if a["status"] == "firing" else (a["ends_at"] or datetime.now(UTC))
        rest = {k: v for k, v in sorted(a["labels"].items()) if k not in labels}
        rows.append({"ts": ts, "eid": eid, "status": a["status"], "fingerprint": a["fingerprint"],
                     "starts_at": a["starts_at"], "ends_at": a["ends_at"], "generator_url": a["generator_url"],
                     **{n: a["labels"].get(n) for n in labels}, "labels": json.dumps(rest),
                     "annotations": json.dumps(a["annotations"], sort_keys=True)})
    names = ["ts", "eid", "status", "fingerprint", "starts_at", "ends_at", "generator_url", *labels, "labels",
             "annotations"]
    types = {"ts": ts_t, "starts_at": ts_t, "ends_at": ts_t}
    return pa.Table.from_arrays([pa.array([r[n] for r in rows], types.get(n, pa.string())) for n in names],
                                names=names)


class AlertReceiver:
    """What ``POST /api/receive/alertmanager/<name>`` does with a notification."""

    def __init__(self, inbox: Inbox, labels: Sequence[str]) -> None:
        self.inbox, self.labels = inbox, tuple(labels)
        self.seen_file = inbox.path.parent / f"{inbox.path.name}.seen"

    @classmethod
    def open(cls, data_dir, name: str) -> AlertReceiver:
        inbox = Inbox.open(data_dir, KIND, name)
        meta = json.loads((inbox.path.parent / f"{name}.json").read_text())
        return cls(inbox, meta["labels"])

    def receive(self, body: Any) -> int:
        """Store the notification's new alert states durably; returns how many."""
        alerts = parse_notification(body)
        lock = _locks.setdefault(str(self.inbox.path), threading.Lock())
        with lock:
            seen = self.seen_file.read_text().split("\n") if self.seen_file.exists() else []
            known = set(seen)
            new, keys = [], []
            for a in alerts:
                key = f"{a['fingerprint']}|{a['starts_at'].isoformat()}|{a['status']}"
                if key not in known:
                    known.add(key)
                    keys.append(key)
                    new.append(a)
            if new:
                self.inbox.write(to_table(new, self.labels))
                kept = [k for k in seen if k][-MAX_SEEN:] + keys
                tmp = self.seen_file.with_suffix(".tmp")
                tmp.write_text("\n".join(kept))
                tmp.replace(self.seen_file)
        return len(new)


def build(spark, options: dict, schema=None):
    """The ``alertmanager`` source kind: options ``name``, ``data_dir``, ``labels``,
    ``maxFilesPerTrigger`` (notifications per micro-batch at most, :mod:`moirae.sources.bounds`)."""
    return receiver_source(spark, options, KIND, AlertPayloadError, parse_labels, schema_ddl)


def firing(alerts):
    """The event-query of inbound alerts: every firing alert is an event (``eid``, ``ts``)."""
    from pyspark.sql import functions as F

    return alerts.filter(F.col("status") == "firing")
