"""Deterministic tuple ids and the provenance column (A 2.3, A 5; DESIGN.md §3).

A source tuple's id is Spark's ``xxhash64`` over the stream name, its event time and its
payload columns, so the id is a function of the tuple alone: a replayed micro-batch, the
Archiver and the provenance wrappers all compute the same id for the same tuple (A 5: "the
ID of t_S's source vertex is based on t_S's attributes"). Sink tuples get ids the same way
(over the sink name instead of a stream name), which makes sink vertices idempotent too.

The backward provenance of a tuple is carried in the column :data:`PROV`: a source
tuple's own ``struct<id:long, ts:timestamp>``, and after a window or a join (and always
at a sink) an ``array`` of such structs, the source tuples that contributed to it (a
source tuple may be named twice: see :mod:`ananke.query`).

Durations are accepted as :class:`~datetime.timedelta` or as Spark-style strings:

>>> to_timedelta("15 minutes")
datetime.timedelta(seconds=900)
>>> spark_interval(timedelta(minutes=2))
'120000 milliseconds'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from moirae.base.errors import MoiraeError

PROV = "_prov"
"""Name of the provenance column carried by every instrumented DataFrame."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_UNITS = {
    "microsecond": 1e-6, "millisecond": 1e-3, "second": 1.0, "minute": 60.0, "hour": 3600.0,
    "day": 86400.0, "week": 604800.0,
}
_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$")


class BadDuration(MoiraeError, ValueError):
    """A duration that is not a timedelta or a string such as ``"15 minutes"``."""


def to_timedelta(value: timedelta | str) -> timedelta:
    """``value`` as a timedelta; strings are ``"<number> <unit>"`` (second ... week)."""
    if isinstance(value, timedelta):
        return value
    m = _DUR_RE.match(str(value).lower())
    if not m or m.group(2) not in _UNITS:
        raise BadDuration(f"not a duration: {value!r} (use a timedelta or e.g. '15 minutes')")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def spark_interval(value: timedelta | str) -> str:
    """The duration in the string form Spark's ``window`` / ``withWatermark`` accept."""
    ms = int(round(to_timedelta(value).total_seconds() * 1000))
    return f"{ms} milliseconds"


def micros(ts: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (naive ones are refused)."""
    if ts.tzinfo is None:
        raise MoiraeError(f"naive datetime {ts!r}: event times must carry a time zone")
    delta = ts - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(us: int) -> datetime:
    """The aware UTC datetime ``us`` microseconds after the epoch."""
    return EPOCH + timedelta(microseconds=int(us))


def source_id_col(stream: str, ts_col: str, cols: Sequence[str]):
    """The source-id column expression: ``xxhash64(stream, ts, *cols)`` (a Spark Column).

    The Archiver uses this very function, so archived rows and provenance agree on ids.
    """
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(stream), F.col(ts_col), *[F.col(c) for c in cols])


def sink_id_col(sink: str, ts_col: str, cols: Sequence[str]):
    """The sink-vertex id column: ``xxhash64("sink:" + name, ts, *payload cols)``."""
    return source_id_col(f"sink:{sink}", ts_col, cols)


def prov_struct_col(stream: str, ts_col: str, cols: Sequence[str]):
    """A source tuple's provenance: the struct ``(id, ts)``."""
    from pyspark.sql import functions as F

    return F.struct(source_id_col(stream, ts_col, cols).alias("id"), F.col(ts_col).alias("ts"))


def stable_id(*parts: Any) -> int:
    """A deterministic signed 64-bit id of plain Python values (pure-Python sink ids).

    >>> stable_id("Q1", 1, {"car": 2}) == stable_id("Q1", 1, {"car": 2})
    True
    """
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def jsonable(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``payload`` with datetimes as ISO strings (for JSON storage)."""
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in payload.items()}
