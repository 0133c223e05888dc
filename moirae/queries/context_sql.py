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

It may also read reference tables (:mod:`archive.reference`), e.g. ``JOIN servers r ON
r.sid = e.sid``: each event sees the rows valid at its own time. The batch is split at
the instants the tables it reads changed (usually none), and each part is read as of its
events' time, so a reloaded table never changes a past event's context, live or
re-materialized.

A Spark context-query costs a Spark job per batch (about a second on a loaded 2-core
machine); this costs one indexed SQL read (milliseconds), which is what keeps an
event's context and its first similar past incident within a few triggers of the
event's window closing.

A stream with rows marked bad (a retraction, :mod:`archive.row_flags`; the archive's
``row_flags``) is read through its flags: removed rows left out, corrected ones with
their new values, live and re-materialized alike.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

import pandas as pd

from archive import history, row_flags
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


_REFERENCES: ContextVar[frozenset[str]] = ContextVar("moirae_context_references", default=frozenset())


@contextmanager
def references_visible(names) -> Iterator[None]:
    """Within the block, :func:`prepare` also accepts the reference tables ``names``
    (the engine declares its reference tables around a context-query's deployment)."""
    token = _REFERENCES.set(frozenset(names))
    try:
        yield
    finally:
        _REFERENCES.reset(token)


def prepare(event: str, name: str, sql: str, known_streams: set[str],
            references: set[str] | frozenset[str] | None = None) -> tuple[str, ...]:
    """Validate a SQL context-query; returns the archived streams it reads. Raises
    :class:`QueryDefinitionError` naming the query and the problem. ``references``: the
    reference tables it may read besides (default: those made visible by
    :func:`references_visible`); they are not among the streams returned.

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
        refs = _REFERENCES.get() if references is None else frozenset(references)
        q = history.prepare(sql, known_streams | {EVENTS}, refs - known_streams)
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
    """Run a SQL context-query for ``events`` (one statement per version of the
    reference tables it reads); returns its rows and the archive type of each result column."""
    refs = getattr(archiver, "references", None)
    read = history.prepare(sql, set(inputs) | {EVENTS}, refs.names() if refs is not None else set()).references
    if read and len(events) > 1:
        cuts = refs.change_times(read)
        part = [bisect_right(cuts, t) for t in pd.to_datetime(events[ev_spec.ts_col], utc=True)]
        if len(set(part)) > 1:  # the tables changed within the batch: each side reads its own version
            groups = pd.Series(part, index=events.index)
            outs = [_run_one(archiver, sql, inputs, events[groups == g], ev_spec, window, after, what, read)
                    for g in sorted(set(part))]
            frame = pd.concat([f for f, _ in outs], ignore_index=True)
            return frame, outs[0][1]
    return _run_one(archiver, sql, inputs, events, ev_spec, window, after, what, read)


def _run_one(archiver, sql: str, inputs: tuple[str, ...], events: pd.DataFrame, ev_spec, window: timedelta,
             after: timedelta, what: str, read: tuple[str, ...]) -> tuple[pd.DataFrame, dict[str, ColumnType]]:
    ts = ev_spec.ts_col
    cols = [c for c, _ in ev_spec.id_columns if c in events.columns]
    types = dict(ev_spec.id_columns)
    arrays = ", ".join(f"%(__ev{i})s::{types[c].value}[]" for i, c in enumerate(cols))
    events_cte = (f"WITH {EVENTS} AS (SELECT * FROM unnest({arrays}) AS {EVENTS}"
                  f"({', '.join(quote(c) for c in cols)}))")
    flags = getattr(archiver, "row_flags", None)
    bad = row_flags.flagged(flags, inputs)  # streams with rows marked bad: read through their flags
    text = history.render(row_flags.flagged_template(sql, bad) if bad else sql,
                          tuple((s, archiver.stream(s).ts_col) for s in inputs),
                          archiver.reference_refs(read) if read else ())
    bound = {f"__ev{i}": _values(events[c]) for i, c in enumerate(cols)}
    if read:  # every event of this call sees the same version (run): read it as of the first
        bound["__as_of"] = (pd.to_datetime(events[ts], utc=True).min().to_pydatetime() if len(events)
                            else pd.Timestamp(0, tz="UTC").to_pydatetime())
    if len(events):
        lo = events[ts].min() - window
        hi = events[ts].max() + after + timedelta(microseconds=1)
        bound.update(__lo=lo.to_pydatetime(), __hi=hi.to_pydatetime())
    else:  # no events: an empty slice (the schema probe)
        bound.update(__lo=pd.Timestamp(0, tz="UTC").to_pydatetime(), __hi=pd.Timestamp(0, tz="UTC").to_pydatetime())
    if bad:
        bound.update(row_flags.flag_params(flags, bad, bound["__lo"], bound["__hi"]))
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
