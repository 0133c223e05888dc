"""The one duration grammar, shared by the configuration, the CLI and the query builder.

A duration is a :class:`~datetime.timedelta`, a number of seconds (``int`` or ``float``,
not ``bool``), or a string: a non-negative number, optional blanks, and an optional unit
(case-insensitive; no unit means seconds). Units, short and long, singular or plural:

======================  ==========================================
``us``                  ``microsecond(s)``
``ms``                  ``millisecond(s)``
``s``, ``sec``          ``second(s)``
``m``, ``min``          ``minute(s)``
``h``, ``hr``           ``hour(s)``
``d``                   ``day(s)``
``w``                   ``week(s)``
======================  ==========================================

>>> parse_duration("90"), parse_duration(90), parse_duration("90s")
(datetime.timedelta(seconds=90), datetime.timedelta(seconds=90), datetime.timedelta(seconds=90))
>>> parse_duration("5m"), parse_duration("5 minutes"), parse_duration("1 hour")
(datetime.timedelta(seconds=300), datetime.timedelta(seconds=300), datetime.timedelta(seconds=3600))
>>> parse_duration("2d"), parse_duration("500ms"), parse_duration("1.5 H")
(datetime.timedelta(days=2), datetime.timedelta(microseconds=500000), datetime.timedelta(seconds=5400))
>>> duration_seconds("15 minutes")
900.0
>>> parse_duration("soon")
Traceback (most recent call last):
...
moirae.base.durations.DurationError: not a duration: 'soon' (like 90, 500ms, 30s, 5m, 1h, 2d or '5 minutes')
>>> parse_duration("0s", positive=True)
Traceback (most recent call last):
...
moirae.base.durations.DurationError: duration must be positive, got '0s'
"""

from __future__ import annotations

import re
from datetime import timedelta

from moirae.base.errors import MoiraeError

__all__ = ["DurationError", "duration_seconds", "parse_duration"]

_SECONDS = {
    "us": 1e-6, "microsecond": 1e-6,
    "ms": 1e-3, "millisecond": 1e-3,
    "s": 1.0, "sec": 1.0, "second": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
    "d": 86400.0, "day": 86400.0,
    "w": 604800.0, "week": 604800.0,
}
_LONG = ("microsecond", "millisecond", "second", "minute", "hour", "day", "week", "sec", "min", "hr")
_UNIT = "|".join(sorted([f"{u}s?" for u in _LONG] + ["us", "ms", "s", "m", "h", "d", "w"], key=len, reverse=True))
_GRAMMAR = re.compile(rf"^\s*(\d+(?:\.\d+)?|\.\d+)\s*({_UNIT})?\s*$", re.IGNORECASE)


class DurationError(MoiraeError, ValueError):
    """A value that is not a duration in the grammar above (or not positive when it must be)."""


def _unit_seconds(unit: str | None) -> float:
    if unit is None:
        return 1.0
    unit = unit.lower()
    if unit not in _SECONDS and unit.endswith("s"):
        unit = unit[:-1]
    return _SECONDS[unit]


def parse_duration(value: object, *, positive: bool = False) -> timedelta:
    """``value`` as a timedelta; raises :class:`DurationError` naming ``value`` otherwise.

    With ``positive=True`` a zero or negative duration is refused as well.
    """
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, bool):
        raise DurationError(f"not a duration: {value!r}")
    elif isinstance(value, int | float):
        td = timedelta(seconds=value)
    else:
        m = _GRAMMAR.match(str(value))
        if not m:
            raise DurationError(f"not a duration: {value!r} (like 90, 500ms, 30s, 5m, 1h, 2d or '5 minutes')")
        td = timedelta(seconds=float(m.group(1)) * _unit_seconds(m.group(2)))
    if positive and td <= timedelta(0):
        raise DurationError(f"duration must be positive, got {value!r}")
    return td


def duration_seconds(value: object, *, positive: bool = False) -> float:
    """``value`` in seconds (a float); the grammar and errors of :func:`parse_duration`."""
    return parse_duration(value, positive=positive).total_seconds()
