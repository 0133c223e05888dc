"""The standard Recall operator (M 3.2, 4.5.1, 4.6).

For each event, :meth:`Recall.task_for` makes a recall task whose history-query is the
template's per-chunk SPJ part (M 4.3) with the event's attributes bound as parameters.
The Recall Manager runs it over chunks newest first and hands each chunk's rows to
:meth:`Recall.on_chunk`, which merges them into the task's partial aggregates, applies
the post-operators and answers with *changes only*: an INSERT for a group that enters the
result, an UPDATE when a group's row changed, a DELETE when a group leaves it (HAVING no
longer holds, or it fell out of a LIMIT). Each output carries the event id and time, a
per-(operator, eid) sequence number and the interval of history it is computed from.

With a ``period`` (e.g. "this week": ``timedelta(days=7)`` before the event), sums and
counts are extrapolated from the history covered so far (M 4.5.1). When the task ends
normally the exact values over the history actually read are emitted.

>>> from datetime import UTC, datetime, timedelta
>>> op = Recall("norm", "SELECT h.sid, count(*) AS n FROM history h GROUP BY h.sid HAVING h.sid = e.sid",
...             period=timedelta(days=7))
>>> spec = op.task_for({"eid": "e1", "ts": datetime(2026, 1, 8, tzinfo=UTC), "sid": "s1"})
>>> spec.params, spec.bound.isoformat()
({'sid': 's1'}, '2026-01-01T00:00:00+00:00')
>>> st = op.start(spec)
>>> day = Interval(datetime(2026, 1, 7, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC))
>>> [(o.kind.value, o.row["n"]) for o in op.on_chunk(st, 0, day, pd.DataFrame({"g0": ["s1"], "a0_n": [10]}))]
[('insert', 70.0)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import sqlglot
from sqlglot import exp

from archive.abc import ChunkStore, HistoryQuery
from recall.aggregate import GroupedMerge, Row, RowMerge, to_py
from recall.api import EndReason, Interval, Output, OutputKind, TaskSpec
from recall.errors import BadTemplate, UnknownEventAttribute
from recall.split import DIALECT, SplitQuery, parse_select, split_template

PERIOD_FROM, PERIOD_TO = "moirae_from", "moirae_to"


def as_utc(ts: Any, what: str = "event time") -> datetime:
    """A timezone-aware UTC datetime from a datetime or pandas Timestamp (naive: error)."""
    if isinstance(ts, pd.Timestamp):
        ts = ts.to_pydatetime()
    if not isinstance(ts, datetime):
        raise BadTemplate(f"{what} must be a datetime, got {ts!r}")
    if ts.tzinfo is None:
        raise BadTemplate(f"{what} must be timezone-aware, got naive {ts!r}")
    return ts.astimezone(UTC)


def union(a: Interval | None, b: Interval) -> Interval:
    """The smallest interval holding both (chunks with no rows in between count as read)."""
    if a is None:
        return b
    return Interval(min(a.start, b.start), max(a.end, b.end))


def _default_time_column(sql: str, store: Any) -> str | None:
    """``alias.ts_col`` of the one stream ``sql`` reads, if the store can tell."""
    if store is None:
        return None
    refs = getattr(store, "references", None)  # reference tables have no time column (archive.reference)
    skip = refs.names() if refs is not None else set()
    tables = [t for t in parse_select(sql).find_all(exp.Table) if t.name not in skip]
    if len({t.name for t in tables}) != 1:
        return None
    try:
        ts_col = store.stream(tables[0].name).ts_col
    except Exception:  # an unknown stream: store.prepare will say so
        return None
    return f"{tables[0].alias_or_name}.{ts_col}"


@dataclass
class RecallState:
    """Per-task state: the merged partials, what was emitted, and the history read."""

    spec: TaskSpec
    merge: GroupedMerge | RowMerge | None
    emitted: dict[str, Row] = field(default_factory=dict)
    seq: int = 0
    covered: Interval | None = None
    chunks: int = 0
    rows: int = 0
    ended: EndReason | None = None

    def current(self) -> dict[str, Row]:
        """The result as emitted so far (key -> row); empty for append-only templates,
        whose rows are not kept."""
        return dict(self.emitted)


@dataclass(frozen=True)
class RecallSpec:
    """The standard Recall operator (M 3.2, 4.5.1); the fields are the arguments of
    :class:`recall.operator.Recall`, which documents them."""

    name: str
    sql: str
    period: timedelta | None = None
    bound: timedelta | None = None
    tickets: int = 100
    feedback_period: int | None = 10
    feedback_timeout: float | None = None
    event_attrs: tuple[str, ...] | None = None
    time_column: str | None = None
    event_alias: str = "e"
    eid_attr: str = "eid"
    ts_attr: str = "ts"
    extrapolate: bool = True

    def __post_init__(self) -> None:
        if self.event_attrs is not None:
            object.__setattr__(self, "event_attrs", tuple(self.event_attrs))

    def build(self, store: ChunkStore | None = None) -> Recall:
        """The operator logic; with a ``store`` its chunk query is validated by it."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        return Recall(kw.pop("name"), kw.pop("sql"), store=store, **kw)


class Recall:
    """A deployed standard Recall operator's logic (implements
    :class:`recall.abc.RecallOperator`); its frozen description is :attr:`spec`
    (:class:`RecallSpec`, whose ``build`` makes one).

    ``sql`` is the history-query template (``:attr`` or ``e.attr`` bind event
    attributes). ``period`` asks for a time period before the event; it makes sums and
    counts extrapolated (M 4.5.1) and, with ``time_column`` (e.g. ``"h.ts"``), restricts
    rows to ``[event_ts - period, event_ts)``; when the template reads one stream of an
    Archiver, its event-time column is used by default. ``bound`` (defaults to ``period``) is how
    far back the task reads; without either the task is unbounded and suspends every
    ``feedback_period`` chunks (M 4.4). With a ``store`` the chunk query is validated by
    ``store.prepare``; without one (tests) a :class:`HistoryQuery` is built directly.
    """

    def __init__(
        self,
        name: str,
        sql: str,
        *,
        period: timedelta | None = None,
        bound: timedelta | None = None,
        tickets: int = 100,
        feedback_period: int | None = 10,
        feedback_timeout: float | None = None,
        store: ChunkStore | None = None,
        event_attrs: tuple[str, ...] | None = None,
        time_column: str | None = None,
        event_alias: str = "e",
        eid_attr: str = "eid",
        ts_attr: str = "ts",
        extrapolate: bool = True,
    ) -> None:
        for what, value in (("period", period), ("bound", bound)):
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise BadTemplate(f"{what} of Recall {name!r} must be a positive timedelta, got {value!r}")
        self.spec = RecallSpec(name, sql, period=period, bound=bound, tickets=tickets,
                               feedback_period=feedback_period, feedback_timeout=feedback_timeout,
                               event_attrs=event_attrs, time_column=time_column, event_alias=event_alias,
                               eid_attr=eid_attr, ts_attr=ts_attr, extrapolate=extrapolate)
        self.name = name
        self.period, self.bound = period, bound if bound is not None else period
        self.tickets, self.feedback_period, self.feedback_timeout = tickets, feedback_period, feedback_timeout
        self.eid_attr, self.ts_attr, self.extrapolate = eid_attr, ts_attr, extrapolate
        extra = None
        if period is not None and time_column is None:
            time_column = _default_time_column(sql, store)
        self.time_column = time_column
        self.time_filtered = period is not None and time_column is not None
        if self.time_filtered:
            extra = sqlglot.parse_one(f"{time_column} >= :{PERIOD_FROM} AND {time_column} < :{PERIOD_TO}",
                                      dialect=DIALECT)
        attrs = None if event_attrs is None else (*event_attrs, eid_attr, ts_attr)
        self.split: SplitQuery = split_template(sql, event_alias=event_alias, event_attrs=attrs, extra_where=extra)
        self.query: HistoryQuery = (store.prepare(self.split.chunk_sql) if store is not None else
                                    HistoryQuery(self.split.chunk_sql, self.split.streams, self.split.params))

    # -- RecallOperator ----------------------------------------------------------------

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        """A task for ``event`` (a mapping with ``eid``, ``ts`` and the attributes the
        template binds)."""
        eid_attr, ts_attr = (self._attr(event, a, d) for a, d in ((self.eid_attr, "eid"), (self.ts_attr, "ts")))
        ts = as_utc(event[ts_attr], f"event {event[eid_attr]!r} {ts_attr}")
        params: dict[str, Any] = {}
        for p in self.split.params:
            if p == PERIOD_FROM:
                params[p] = ts - self.period
            elif p == PERIOD_TO:
                params[p] = ts
            elif p not in event:
                raise UnknownEventAttribute(
                    f"Recall {self.name!r} binds :{p} but event {event[eid_attr]!r} carries only "
                    f"{', '.join(sorted(map(str, event)))}")
            else:
                value = event[p]
                params[p] = [to_py(v) for v in value] if isinstance(value, list | tuple) else to_py(value)
        if getattr(self.query, "references", ()):  # reference tables are read as of the event's time
            params["__as_of"] = ts
        bound = ts - self.bound if self.bound is not None else None
        return TaskSpec(
            operator=self.name, eid=str(event[eid_attr]), event_ts=ts, query=self.query, params=params,
            bound=bound, tickets=self.tickets,
            feedback_period=self.feedback_period if bound is None else None,
            feedback_timeout=self.feedback_timeout if bound is None else None,
            extra={"period": self.period} if self.period is not None else {})

    def _attr(self, event: Mapping[str, Any], attr: str, default: str) -> str:
        """The event's key for ``attr``; the engine's events also carry it as ``eid``/``ts``."""
        if attr in event:
            return attr
        if default in event:
            return default
        raise UnknownEventAttribute(f"event {dict(event)!r} has no {attr!r} attribute (Recall {self.name!r})")

    def start(self, spec: TaskSpec) -> RecallState:
        merge = GroupedMerge(self.split, spec.params) if self.split.aggregated else RowMerge(self.split)
        return RecallState(spec=spec, merge=merge)

    def on_chunk(self, state: RecallState, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        """Merge one chunk's rows; return the changes to the result (M 4.6)."""
        if state.merge is None:
            return []
        state.covered = union(state.covered, covered)
        state.chunks += 1
        state.rows += state.merge.add(rows)
        return self._emit(state, self.factor(state))

    def on_end(self, state: RecallState, reason: EndReason) -> list[Output]:
        """On DONE, the exact (unextrapolated) result over the history read; otherwise
        nothing, and the state is freed."""
        state.ended = reason
        out = self._emit(state, 1.0) if reason is EndReason.DONE and state.merge is not None else []
        state.merge = None
        return out

    # -- online aggregation ------------------------------------------------------------

    def data_interval(self, state: RecallState) -> Interval | None:
        """The history the current values are computed from: what was read, clipped to
        the period when rows are filtered to it."""
        cov = state.covered
        if cov is None or not self.time_filtered:
            return cov
        ts = state.spec.event_ts
        start, end = max(cov.start, ts - self.period), min(cov.end, ts)
        return Interval(start, end) if start < end else Interval(start, start)

    def factor(self, state: RecallState) -> float:
        """Period over the span read so far (>= 1); 1 without a period (M 4.5.1)."""
        if self.period is None or not self.extrapolate:
            return 1.0
        data = self.data_interval(state)
        if data is None:
            return 1.0
        span = min(data.end, state.spec.event_ts) - max(data.start, state.spec.event_ts - self.period)
        if span <= timedelta(0) or span >= self.period:
            return 1.0
        return self.period / span

    def _emit(self, state: RecallState, factor: float) -> list[Output]:
        covered = self.data_interval(state)
        out: list[Output] = []

        def put(kind: OutputKind, key: str, row: Row) -> None:
            state.seq += 1
            out.append(Output(self.name, state.spec.eid, state.spec.event_ts, kind, state.seq, key, row, covered))

        if isinstance(state.merge, RowMerge) and state.merge.append_only:
            for key, row in state.merge.take_fresh():  # only inserts; nothing kept (M 4.3)
                put(OutputKind.INSERT, key, row)
            return out
        result = dict(state.merge.result(factor))

        for key in [k for k in state.emitted if k not in result]:
            put(OutputKind.DELETE, key, state.emitted.pop(key))
        for key, row in result.items():
            old = state.emitted.get(key)
            if old is None:
                put(OutputKind.INSERT, key, row)
            elif old != row:
                put(OutputKind.UPDATE, key, row)
            else:
                continue
            state.emitted[key] = row
        return out
