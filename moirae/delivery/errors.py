"""Errors of alert delivery.

>>> issubclass(DeliveryConfigError, ValueError)
True
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class DeliveryError(MoiraeError):
    """Root of the alert-delivery errors."""


class DeliveryConfigError(DeliveryError, ValueError):
    """A bad alert target (the message names the target's index and key)."""


class DeliveryFailed(DeliveryError, ConnectionError):
    """A delivery that failed its last try (it is then dead-lettered)."""
