"""Context-queries written in SQL (M 3.3): one read-only query per batch.

A context-query given as SQL text instead of a Spark function reads a relation named
``events`` (the batch's events, with the event stream's columns) and archived streams
by name, e.g. the users logged in on the server within two minutes before each event::

    SELECT DISTINCT e.eid, e.ts, s."user"
    FROM events e JOIN users s
      ON s.sid = e.sid AND s.ts <= e.ts AND s.ts > e.ts - interval '2 minutes'

It runs in PostgreSQL as one statement for the whole batch of events, under the same
rules as a history-query (:mod:`archive.history`): a single read-only SELECT over
registered streams, in a READ ONLY transaction with the statement timeout. The events
are bound as arrays (never formatted into the text), and every stream it reads is
restricted to ``[min ts - window, max ts + after]`` of the batch, so the query's cost
follows the batch, not the archive. The live path and batch re-materialization (M 4.2)
run the same text, so live and past contexts are computed alike.

A Spark context-query costs a Spark job per batch (about a second on a loaded 2-core
machine); this costs one indexed SQL read (milliseconds), which is what keeps an
event's context and its first similar past incident within a few triggers of the
event's window closing.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from archive import history
from archive.errors import UnsafeQuery
from archive.names import quote
from archive.types import ColumnType, UnsupportedType
from moirae.queries.hybrid import QueryDefinitionError

EVENTS = "events"

# PostgreSQL type OIDs of a result column -> the archive's column types
_OID_TYPES = {
    16: ColumnType.BOOLEAN, 20: ColumnType.BIGINT, 21: ColumnType.BIGINT, 23: ColumnType.BIGINT,
    700: ColumnType.DOUBLE, 701: ColumnType.DOUBLE, 1700: ColumnType.DOUBLE,
    25: ColumnType.TEXT, 1042: ColumnType.TEXT, 1043: ColumnType.TEXT, 19: ColumnType.TEXT,
    1082: ColumnType.TIMESTAMPTZ, 1114: ColumnType.TIMESTAMPTZ, 1184: ColumnType.TIMESTAMPTZ,
}


def prepare(event: str, name: str, sql: str, known_streams: set[str]) -> tuple[str, ...]:
    """Validate a SQL context-query; returns the archived streams it reads. Raises
    :class:`QueryDefinitionError` naming the query and the problem.

    >>> prepare("overload", "users", "SELECT e.eid, e.ts, s.sid FROM events e JOIN users s ON s.sid = e.sid",
    ...         {"users"})
    ('users',)
    >>> prepare("overload", "users", "SELECT eid, ts FROM users WHERE sid = :sid", {"users"})
    Traceback (most recent call last):
    ...
    moirae.queries.errors.QueryDefinitionError: context-query 'users' of 'overload' may not use parameters (:sid): \
it reads the batch's events from the relation 'events'
    """
    where = f"context-query {name!r} of {event!r}"
    if EVENTS in known_streams:
        raise QueryDefinitionError(f"{where}: an archived stream is named {EVENTS!r}, the name a SQL "
                                   f"context-query reads its events from; rename the stream")
    try:
        q = history.prepare(sql, known_streams | {EVENTS})
    except UnsafeQuery as exc:
        raise QueryDefinitionError(f"{where}: {str(exc).replace('history-query', 'SQL')}") from None
    if q.params:
        raise QueryDefinitionError(f"{where} may not use parameters (:{q.params[0]}): it reads the batch's "
                                   f"events from the relation {EVENTS!r}")
    if EVENTS not in q.streams:
        raise QueryDefinitionError(f"{where} must read the relation {EVENTS!r} (the batch's events): {sql!r}")
    return tuple(s for s in q.streams if s != EVENTS)


def run(archiver, sql: str, inputs: tuple[str, ...], events: pd.DataFrame, ev_spec, window: timedelta,
        after: timedelta, what: str) -> tuple[pd.DataFrame, dict[str, ColumnType]]:
    """Run a SQL context-query for ``events`` (one statement); returns its rows and the
    archive type of each result column."""
    ts = ev_spec.ts_col
    cols = [c for c, _ in ev_spec.id_columns if c in events.columns]
    types = dict(ev_spec.id_columns)
    arrays = ", ".join(f"%(__ev{i})s::{types[c].value}[]" for i, c in enumerate(cols))
    events_cte = (f"WITH {EVENTS} AS (SELECT * FROM unnest({arrays}) AS {EVENTS}"
                  f"({', '.join(quote(c) for c in cols)}))")
    text = history.render(sql, tuple((s, archiver.stream(s).ts_col) for s in inputs))
    bound = {f"__ev{i}": _values(events[c]) for i, c in enumerate(cols)}
    if len(events):
        lo = events[ts].min() - window
        hi = events[ts].max() + after + timedelta(microseconds=1)
        bound.update(__lo=lo.to_pydatetime(), __hi=hi.to_pydatetime())
    else:  # no events: an empty slice (the schema probe)
        bound.update(__lo=pd.Timestamp(0, tz="UTC").to_pydatetime(), __hi=pd.Timestamp(0, tz="UTC").to_pydatetime())
    full = f"{events_cte} SELECT * FROM ({text}) AS _context"
    names, oids, rows = archiver.db.retry(lambda: history.read_only(archiver.catalog, full, bound, what, sql), what)
    out_types = {}
    for n, oid in zip(names, oids, strict=True):
        if oid not in _OID_TYPES:
            raise UnsupportedType(f"{what}: result column {n!r} has a PostgreSQL type (oid {oid}) the archive "
                                  f"cannot store; cast it to bigint, double precision, text, boolean or timestamptz")
        out_types[n] = _OID_TYPES[oid]
    frame = pd.DataFrame(rows, columns=names)
    if len(frame) and ts in frame.columns:
        frame[ts] = pd.to_datetime(frame[ts], utc=True)
    return frame, out_types


def _values(col: pd.Series) -> list:
    """A column as plain Python values for an array parameter (NULL for NaN / NaT)."""
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return [None if pd.isna(v) else v.to_pydatetime() for v in pd.to_datetime(col, utc=True)]
    return col.astype(object).where(col.notna(), None).tolist()
