"""Alert payloads: Moirae's JSON, Slack's message, Alertmanager's ``/api/v2/alerts`` items.

An *alert* here is the dict :func:`moirae.delivery.summary.describe` builds, plus
``status`` (``firing`` or ``resolved``) and ``console`` (a link to the incident on
the console).

>>> a = {"event": "overload", "eid": "e1", "ts": "2024-01-01T00:00:00+00:00", "attrs": {"sid": "h1"},
...      "incident": "i1", "status": "firing", "console": "http://c/#/incident/i1",
...      "similar": [{"eid": "e0", "incident": "i0", "score": 0.9, "resolution": "restart db"}]}
>>> am = alertmanager_alert(a, {"team": "ops"}, 0)
>>> am["labels"]["alertname"], am["labels"]["incident"], am["annotations"]["similar_incidents"]
('overload', 'i1', 'i0 (score 0.90): restart db')
>>> slack(a)["text"].splitlines()[0]
':rotating_light: overload firing (incident i1)'
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

LABEL_ATTRS = 5  # at most this many text attributes of the event become labels


def _resolution_text(r: Any) -> str:
    if r is None:
        return "no resolution recorded"
    return r if isinstance(r, str) else json.dumps(r, separators=(",", ":"), default=str)[:300]


def similar_text(alert: dict[str, Any]) -> str:
    """The similar incidents on one line each: ``incident (score s): resolution``."""
    lines = [f"{s['incident']} (score {s['score']:.2f}): {_resolution_text(s.get('resolution'))}"
             if isinstance(s.get("score"), float) else f"{s['incident']}: {_resolution_text(s.get('resolution'))}"
             for s in alert.get("similar") or []]
    return "\n".join(lines) if lines else "none found"


def moirae_json(alert: dict[str, Any]) -> dict[str, Any]:
    """The webhook body (format ``json``)."""
    return {"version": 1, **alert, "similar_incidents": similar_text(alert)}


def slack(alert: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message (``text`` plus ``blocks``)."""
    icon = ":rotating_light:" if alert["status"] == "firing" else ":white_check_mark:"
    head = f"{icon} {alert['event']} {alert['status']} (incident {alert.get('incident') or alert['eid']})"
    attrs = ", ".join(f"{k}={v}" for k, v in (alert.get("attrs") or {}).items())
    body = f"*at* {alert.get('ts')}  {attrs}\n*similar past incidents:*\n{similar_text(alert)}"
    link = f"<{alert['console']}|open in the Moirae console>" if alert.get("console") else ""
    return {"text": f"{head}\n{similar_text(alert)}",
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{head}*"}},
                       {"type": "section", "text": {"type": "mrkdwn", "text": body}},
                       *([{"type": "context", "elements": [{"type": "mrkdwn", "text": link}]}] if link else [])]}


def alertmanager_alert(alert: dict[str, Any], extra_labels: dict[str, str], resend: float) -> dict[str, Any]:
    """One item of ``POST /api/v2/alerts``. Its identity (labels) is the event-query and
    the incident, so an incident is one alert; ``endsAt`` is now once it is resolved."""
    labels = {"alertname": str(alert["event"]), "incident": str(alert.get("incident") or alert["eid"]),
              "source": "moirae"}
    text_attrs = [(k, v) for k, v in (alert.get("attrs") or {}).items() if isinstance(v, str) and k.isidentifier()]
    for k, v in text_attrs[:LABEL_ATTRS]:
        labels.setdefault(k, v)
    labels.update(extra_labels)
    similar = alert.get("similar") or []
    ann = {"summary": f"{alert['event']} at {alert.get('ts')} (event {alert['eid']})",
           "similar_incidents": similar_text(alert),
           "similar_json": json.dumps(similar, separators=(",", ":"), default=str)[:4000],
           "resolutions": "\n".join(_resolution_text(s.get("resolution")) for s in similar) or "none found",
           "console": alert.get("console") or ""}
    item: dict[str, Any] = {"labels": labels, "annotations": ann, "startsAt": alert.get("ts") or _now()}
    if alert.get("console"):
        item["generatorURL"] = alert["console"]
    if alert["status"] == "resolved":
        item["endsAt"] = _now()
    return item


def _now() -> str:
    return datetime.now(UTC).isoformat()
