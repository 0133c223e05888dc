"""The errors of the command line's own checks (what argparse cannot see alone)."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class ReplayFlagError(MoiraeError, ValueError):
    """A ``moirae replay`` flag that would have no effect in this combination (names the flag)."""


class ReplayMismatch(MoiraeError, ValueError):
    """A stream already holding a replay of another file or with other options."""


class NoMonitorFile(MoiraeError, FileNotFoundError):
    """``moirae deploy`` / ``moirae run --monitors`` given a path with no monitor file."""
