"""The incident store's errors (the API maps them to HTTP 422 and 404)."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class IncidentError(MoiraeError, ValueError):
    """A bad incident request (HTTP 422): names the value."""


class NoSuchIncident(MoiraeError, LookupError):
    """An incident id the store does not hold (HTTP 404)."""


__all__ = ["IncidentError", "NoSuchIncident"]
