"""The error of the read surface (:mod:`moirae.read.abc`)."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class EngineNotRunning(MoiraeError, RuntimeError):
    """Steering asked of a read-only view: no engine runs in this process (HTTP 409)."""
