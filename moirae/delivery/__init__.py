"""Alerts out: webhooks (JSON, HMAC-signed), Slack-compatible messages and Prometheus
Alertmanager, per event-query, with each alert's top similar past incidents, their
resolutions and a console link (M 3.4-3.5).

- :mod:`~moirae.delivery.targets`: the target kinds and their options (:func:`parse_targets`);
- :mod:`~moirae.delivery.router`: :class:`AlertRouter`, which follows the engine's bus and
  sends firing and resolved alerts;
- :mod:`~moirae.delivery.send`: tries with backoff, then the dead-letter table;
- :mod:`~moirae.delivery.signing`: the HMAC signature a webhook receiver verifies;
- :mod:`~moirae.delivery.payloads`, :mod:`~moirae.delivery.summary`: what an alert carries.
"""

from moirae.delivery.errors import DeliveryConfigError, DeliveryError, DeliveryFailed
from moirae.delivery.router import AlertRouter
from moirae.delivery.signing import sign, verify
from moirae.delivery.targets import Target, parse_targets

__all__ = ["AlertRouter", "DeliveryConfigError", "DeliveryError", "DeliveryFailed", "Target", "parse_targets",
           "sign", "verify"]
