"""Argument types of the ``moirae`` command line: each turns one typed word into a value
or raises :class:`argparse.ArgumentTypeError` with one line saying why. Durations and
tickets use the one grammar of the whole system (:mod:`moirae.base.durations`,
:mod:`scheduler.tickets`)."""

from __future__ import annotations

import argparse
from datetime import datetime

from moirae.base.durations import DurationError, duration_seconds
from scheduler.errors import InvalidTickets
from scheduler.tickets import parse_tickets


def duration(text: str) -> float:
    """A positive duration in seconds (``60``, ``30s``, ``5m``)."""
    try:
        return duration_seconds(text, positive=True)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def tickets(text: str) -> int:
    """A positive ticket count."""
    try:
        return parse_tickets(text)
    except InvalidTickets as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def speedup(text: str) -> float | str:
    """Scenario seconds per wall second (a positive number), or ``max``."""
    if text == "max":
        return text
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"speedup must be a positive number or max, got {text!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"speedup must be a positive number or max, got {text!r}")
    return x


def iso_time(text: str) -> datetime:
    """An ISO 8601 time with a zone (``Z`` is UTC)."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(f"time needs a zone (e.g. {text}Z): {text!r}")
    return t
