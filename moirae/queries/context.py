"""Computing event contexts (M 3.3) with the context-query functions.

For a batch of events, each context-query gets the events and, per input stream, the
archived tuples valid in ``[event_ts - window, event_ts]`` (the union over the batch),
as static Spark DataFrames; a SQL context-query instead runs as one PostgreSQL read
(:mod:`moirae.queries.context_sql`). The same function runs over archived chunks when a replica
materializes history, so live and past contexts are computed alike (M 4.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta
from typing import Any

import pandas as pd

from archive import Archiver
from archive.spark_sink import spark_schema, spec_from_spark_schema, to_spark
from archive.streams import StreamSpec
from moirae.queries import context_sql
from moirae.queries.hybrid import ContextQuery, EventQuery, QueryDefinitionError, context_stream


def compute_context(spark, archiver, cq: ContextQuery, events: pd.DataFrame, ev_spec,
                    eid: str = "eid", ts: str = "ts"):
    """Run one context-query for ``events``; returns its ``(eid, ts, attrs...)`` rows and
    their Spark schema (None when there are no events, or for a SQL context-query)."""
    if events.empty:
        return pd.DataFrame(columns=[eid, ts]), None
    if cq.sql is not None:  # one PostgreSQL read for the batch (moirae.queries.context_sql)
        frame, _types = context_sql.run(archiver, cq.sql, cq.inputs, events, ev_spec, cq.window, cq.after,
                                        f"context-query {cq.name!r} of {cq.event!r}")
        return frame, None
    lo = events[ts].min() - cq.window
    hi = events[ts].max() + cq.after + timedelta(microseconds=1)
    inputs = []
    for name in cq.inputs:
        spec = archiver.stream(name)
        inputs.append(to_spark(spark, archiver.read(name, lo.to_pydatetime(), hi.to_pydatetime()), spec))
    ev_df = to_spark(spark, events, ev_spec)
    out = cq.fn(ev_df, *inputs)
    if eid not in out.columns or ts not in out.columns:
        raise QueryDefinitionError(f"context-query {cq.name!r} of {cq.event!r} must produce columns "
                                   f"{eid!r} and {ts!r}, got {out.columns}")
    frame = out.toArrow().to_pandas()
    if len(frame):
        frame[ts] = pd.to_datetime(frame[ts], utc=True)
    return frame, out.schema


class ContextRunner:
    """Runs the context-queries of one batch of events side by side, each with what
    follows it (archiving its rows), on a small thread pool of its own.

    A SQL context-query is a PostgreSQL read (the driver waits on the server, its GIL
    released), so three of them overlap rather than queue: the worker's contexts then
    take about the slowest one's time, not the sum (:mod:`moirae.ingest.event_worker`).
    Results keep the queries' order. When
    one fails, the others are still waited for before its error is raised, so nothing
    of the batch runs on after the worker has moved on."""

    def __init__(self, workers: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="moirae-contexts")

    def run(self, cqs: Sequence[ContextQuery], one: Callable[[ContextQuery], pd.DataFrame]) -> dict:
        """``{cq: one(cq)}`` for each of ``cqs``, in their order."""
        if len(cqs) <= 1:
            return {cq: one(cq) for cq in cqs}
        futures = [self._pool.submit(one, cq) for cq in cqs]
        wait(futures)
        return {cq: f.result() for cq, f in zip(cqs, futures, strict=True)}

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def context_tuples(frame: pd.DataFrame, eid_value: str, eid: str = "eid", ts: str = "ts") -> list[dict]:
    """The context of one event: its tuples as attribute dicts (eid and ts removed)."""
    if frame.empty:
        return []
    return contexts_by_eid(frame[frame[eid] == eid_value], eid, ts).get(eid_value, [])


def contexts_by_eid(frame: pd.DataFrame, eid: str = "eid", ts: str = "ts") -> dict[Any, list[dict]]:
    """Every event's context in ``frame`` at once (one pass, not a filter per event):
    ``{eid: [tuple as an attribute dict, ...]}`` in the frame's order, nulls left out, as
    :func:`context_tuples` gives one event's.

    >>> f = pd.DataFrame({"eid": ["a", "b", "a"], "ts": [0, 0, 0], "user": ["x", None, "y"]})
    >>> contexts_by_eid(f)
    {'a': [{'user': 'x'}, {'user': 'y'}], 'b': [{}]}
    """
    if frame.empty:
        return {}
    cols = [c for c in frame.columns if c not in (eid, ts)]
    out: dict[Any, list[dict]] = {}
    for key, *vals in frame[[eid, *cols]].itertuples(index=False, name=None):
        out.setdefault(key, []).append({c: v for c, v in zip(cols, vals, strict=True)
                                        if v is not None and not (isinstance(v, float) and v != v)})
    return out


def context_spec(spark: Callable[[], Any], arch: Archiver, cq: ContextQuery, q: EventQuery,
                 ev_spec: StreamSpec) -> StreamSpec:
    """The stream spec of ``cq``'s context stream (archive inference, M 4.2: it is archived
    from deployment on). Its schema comes from applying the function to empty inputs (no
    Spark job), or from running the SQL for no events."""
    name = context_stream(cq.event, cq.name)
    if cq.sql is not None:
        probe = pd.DataFrame(columns=[c for c, _ in ev_spec.id_columns])
        _rows, types = context_sql.run(arch, cq.sql, cq.inputs, probe, ev_spec, cq.window, cq.after,
                                       f"context-query {cq.name!r} of {cq.event!r}")
        columns = set(types)
    else:
        session = spark()
        empty = [session.createDataFrame([], spark_schema(arch.stream(s))) for s in (ev_spec.name, *cq.inputs)]
        schema = cq.fn(*empty).schema
        columns = {f.name for f in schema.fields}
    if q.eid not in columns or q.ts not in columns:
        raise QueryDefinitionError(f"context-query {cq.name!r} of {cq.event!r} must produce columns "
                                   f"{q.eid!r} and {q.ts!r}, got {sorted(columns)}")
    return (StreamSpec.build(name, q.ts, types, kind="context", indexes=[(q.eid,)]) if cq.sql is not None
            else spec_from_spark_schema(name, schema, q.ts, kind="context", indexes=[(q.eid,)]))
