"""The one check of a ticket count (M 4.4).

A ticket count is a whole number (an ``int``, never a ``bool``) from a floor (1 unless
the caller says otherwise) to an optional ceiling. Every place that takes tickets from a
caller (the schedulers, the Recall Manager, the CLI and the API) checks it here, so they
agree on what a ticket count is and name the culprit the same way.
"""

from __future__ import annotations

from scheduler.errors import InvalidTickets

MAX_TICKETS = 1_000_000
"""The largest ticket count a front (CLI, API, console) accepts in one request."""


def check_tickets(
    value: object,
    *,
    subject: str | None = None,
    minimum: int = 1,
    maximum: int | None = None,
    minimum_name: str | None = None,
) -> int:
    """Return ``value`` if it is a ticket count, else raise :class:`InvalidTickets`.

    ``subject`` (e.g. ``"event 'e1'"``) prefixes the message; ``minimum_name`` names the
    setting the floor comes from (e.g. ``"min_tickets"``). The message always ends with
    ``got <value!r>``:

    >>> check_tickets(5)
    5
    >>> check_tickets(0, subject="event 'e'")
    Traceback (most recent call last):
    ...
    scheduler.errors.InvalidTickets: event 'e': tickets must be a positive integer, got 0
    >>> check_tickets(True, maximum=10)
    Traceback (most recent call last):
    ...
    scheduler.errors.InvalidTickets: tickets must be an integer from 1 to 10, got True
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum  # type: ignore[operator]
    if ok:
        return value  # type: ignore[return-value]
    floor = f"{minimum_name}={minimum}" if minimum_name else str(minimum)
    if maximum is not None:
        want = f"an integer from {floor} to {maximum}"
    elif minimum == 1 and not minimum_name:
        want = "a positive integer"
    else:
        want = f"an integer >= {floor}"
    prefix = f"{subject}: " if subject else ""
    raise InvalidTickets(f"{prefix}tickets must be {want}, got {value!r}")


def parse_tickets(text: str, **bounds: object) -> int:
    """Parse a decimal ticket count typed by a person (a command-line argument) and check
    it with :func:`check_tickets` (``bounds`` are its keyword arguments).

    >>> parse_tickets(" 7 ")
    7
    >>> parse_tickets("x")
    Traceback (most recent call last):
    ...
    scheduler.errors.InvalidTickets: tickets must be a positive integer, got 'x'
    """
    try:
        value: object = int(text)
    except (TypeError, ValueError):
        value = text  # not a number: check_tickets refuses it, naming what was typed
    return check_tickets(value, **bounds)  # type: ignore[arg-type]
