"""Errors of retractions, corrections and forward lookup.

Each refusal is one line naming what was wrong and with which value; a refused
retraction changes nothing.

>>> issubclass(BadPredicate, ValueError) and issubclass(NoSuchRetraction, LookupError)
True
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class RetractError(MoiraeError):
    """Root of the retraction errors."""


class BadPredicate(RetractError, ValueError):
    """A retraction predicate that is not one safe boolean condition over the stream's columns."""


class BadSelection(RetractError, ValueError):
    """A retraction or lookup that names no rows, or names them two ways, or a bad time range."""


class UnknownRetractStream(RetractError, LookupError):
    """A retraction or lookup over a stream the archive does not hold."""


class TooBroad(RetractError, ValueError):
    """A retraction that would flag more than the configured share of the stream's archive, unconfirmed."""


class NoSuchRetraction(RetractError, LookupError):
    """An unknown retraction id (undo, get)."""
