"""The errors of the HTTP API, its server and its client (stdlib only, so the steering
commands import them without FastAPI). Each names what was wrong and with which value."""

from __future__ import annotations

from moirae.base.errors import MoiraeError
from moirae.read.errors import EngineNotRunning

__all__ = ["ApiError", "BadEids", "BadTickets", "ClientError", "EngineNotRunning", "NoEngine", "NoSuchEvent"]


class ApiError(MoiraeError, ValueError):
    """An API server that may not start as configured (names the host)."""


class ClientError(MoiraeError, RuntimeError):
    """A steering call that did not succeed (no engine listening, refused, 404, ...)."""


class NoEngine(ClientError, ConnectionError):
    """Nothing listens at the API's address: no engine is running."""


class NoSuchEvent(MoiraeError, LookupError):
    """An event id the event log does not hold (HTTP 404)."""


class BadTickets(MoiraeError, ValueError):
    """An accelerate amount that is not a positive integer up to MAX_TICKETS (HTTP 422)."""


class BadEids(MoiraeError, ValueError):
    """A bulk request's event ids that are not 1 to MAX_BULK strings (HTTP 422)."""
