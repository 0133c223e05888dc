"""Deterministic tuple ids and the provenance column (A 2.3, A 5).

A source tuple's id is Spark's ``xxhash64`` over the stream name, its event time and its
payload columns, so the id is a function of the tuple alone: a replayed micro-batch, the
Archiver and the provenance wrappers all compute the same id for the same tuple (A 5: "the
ID of t_S's source vertex is based on t_S's attributes"). Sink tuples get ids the same way
(over the sink name instead of a stream name), which makes sink vertices idempotent too.

The backward provenance of a tuple is carried in the column :data:`PROV`: a source
tuple's own ``struct<id:long, ts:timestamp>``, and after a window or a join (and always
at a sink) an ``array`` of such structs, the source tuples that contributed to it (a
source tuple may be named twice: see :mod:`ananke.query`).

Durations are accepted in the project's one grammar (:mod:`moirae.base.durations`): a
:class:`~datetime.timedelta`, a number of seconds, or a string such as ``"15 minutes"``:

>>> to_timedelta("15 minutes")
datetime.timedelta(seconds=900)
>>> spark_interval(timedelta(minutes=2))
'120000 milliseconds'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ananke.errors import AnankeError, BadDuration
from moirae.base.durations import DurationError, parse_duration

PROV = "_prov"
"""Name of the provenance column carried by every instrumented DataFrame."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_timedelta(value: timedelta | str | float) -> timedelta:
    """``value`` as a timedelta, by :func:`moirae.base.durations.parse_duration`; anything
    else raises :class:`~ananke.errors.BadDuration` naming ``value``."""
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise BadDuration(str(exc)) from None


def spark_interval(value: timedelta | str) -> str:
    """The duration in the string form Spark's ``window`` / ``withWatermark`` accept."""
    ms = int(round(to_timedelta(value).total_seconds() * 1000))
    return f"{ms} milliseconds"


def micros(ts: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (naive ones are refused)."""
    if ts.tzinfo is None:
        raise AnankeError(f"naive datetime {ts!r}: event times must carry a time zone")
    delta = ts - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(us: int) -> datetime:
    """The aware UTC datetime ``us`` microseconds after the epoch."""
    return EPOCH + timedelta(microseconds=int(us))


def source_id_col(stream: str, ts_col: str, cols: Sequence[str]):
    """The source-id column expression: ``xxhash64(stream, ts, *cols)`` (a Spark Column).

    The one definition is :func:`archive.ids.spark_source_id`, which the Archiver's sink
    uses too, so archived rows and provenance agree on ids.
    """
    from archive.ids import spark_source_id

    return spark_source_id(stream, [ts_col, *cols])


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
