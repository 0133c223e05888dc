"""The query model (M 3): event-queries, context-queries and the recall operators
attached to them, as frozen descriptions the Deploy Manager works from.

- An *event-query* (M 3.1) is a function over instrumented source streams
  (:class:`ananke.query.Provenanced`) returning a stream of ``(eid, ts, attrs...)``.
  Because it is a function, the engine applies it to the live streams and, unchanged,
  to archived chunks in batch (replicas, M 4.2).
- A *context-query* (M 3.3) is a function ``(events, *inputs) -> (eid, ts, attrs...)``
  over plain DataFrames: the events to describe and, per input stream, the tuples valid
  within ``window`` before each event. The union of its tuples sharing an eid is that
  event's context; it may be empty. ``surrounding`` ones carry extra information shown
  with similar events but not compared (M 3.3, "additional queries").
  A context-query may instead be SQL text over a relation ``events`` and archived
  streams (:mod:`moirae.queries.context_sql`): one PostgreSQL read per batch, no Spark job.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from moirae.queries.errors import QueryDefinitionError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or "__" in name:
        raise QueryDefinitionError(f"{kind} name must match [a-z][a-z0-9_]{{0,30}} (got {name!r})")
    return name


def event_stream(event: str) -> str:
    """The archived stream holding an event-query's events."""
    return f"ev_{event}"


def context_stream(event: str, name: str) -> str:
    """The archived stream holding one context-query's tuples."""
    return f"cx_{event}_{name}"


@dataclass(frozen=True)
class EventQuery:
    name: str
    fn: Callable
    inputs: tuple[str, ...]
    eid: str = "eid"
    ts: str = "ts"


@dataclass(frozen=True)
class ContextQuery:
    event: str
    name: str
    fn: Callable | None  # None for a SQL context-query
    inputs: tuple[str, ...]
    window: timedelta = timedelta(minutes=5)
    surrounding: bool = False
    after: timedelta = timedelta(0)  # how far past the event its inputs are read (surrounding)
    attrs: tuple[str, ...] = field(default=())
    sql: str | None = None  # the SQL text of a SQL context-query (moirae.queries.context_sql)
