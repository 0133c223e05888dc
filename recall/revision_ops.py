"""Revision-aware downstream operators over recall output streams (M 4.6, figs. 10-12).

A Recall operator's output improves as history arrives: besides inserts it carries
*revision tuples*, updates and deletes of rows it produced before, all stamped with the
event's timestamp. Operators downstream of it therefore keep, per event, the state they
need to process a revision (the rows they consumed and what they emitted), and drop it
only when a BOUNDARY output says no more revisions can come (M fig. 11).

Every operator has the same small verb set: ``on_output(out) -> list[Output]`` consumes
one recall output (insert, update, delete or boundary) and answers with its own outputs,
again inserts, updates, deletes and the forwarded boundary; the join also has
``on_other(row) -> list[Output]`` for its other (live) stream.

Boundaries. The Recall Manager publishes one boundary per event once all its tasks have
ended, not necessarily in event-time order, so by default a boundary closes exactly its
event. With ``ordered_boundaries=True`` a boundary at time T also closes every event
older than T, the paper's punctuation semantics (M 4.6: a boundary "ensures [...] that
all following tuples will have a timestamp higher than the boundary timestamp"). An
output for a closed event is a contract violation: it is counted in ``late`` and dropped.

>>> from datetime import UTC, datetime
>>> t = datetime(2026, 1, 1, tzinfo=UTC)
>>> f = RevisionFilter("light", lambda r: r["cpu"] < 50)
>>> [o.kind.value for o in f.on_output(Output("r", "e1", t, OutputKind.INSERT, 1, "p1", {"cpu": 80}, None))]
[]
>>> [o.kind.value for o in f.on_output(Output("r", "e1", t, OutputKind.UPDATE, 2, "p1", {"cpu": 20}, None))]
['insert']
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from recall.api import Interval, Output, OutputKind
from recall.errors import RecallError, RevisionError  # noqa: F401  (re-exported)

Row = Mapping[str, Any]


def apply_revision(rows: dict[str, Row], out: Output) -> None:
    """Apply one recall output to ``rows`` (key -> row) as a subscriber does (M 4.6): an
    insert or an update holds a copy of its row under its key, a delete removes the key
    (if held), a boundary changes nothing. The one revision applier: it checks nothing,
    so a consumer that sees part of a stream (the console, the terminal board) takes it
    as it comes; :class:`ResultTable` checks the stream before applying it here.

    >>> from datetime import UTC, datetime
    >>> t, rows = datetime(2026, 1, 1, tzinfo=UTC), {}
    >>> apply_revision(rows, Output("r", "e1", t, OutputKind.INSERT, 1, "a", {"v": 1}, None))
    >>> apply_revision(rows, Output("r", "e1", t, OutputKind.UPDATE, 2, "a", {"v": 2}, None))
    >>> apply_revision(rows, Output("r", "e1", t, OutputKind.DELETE, 3, "b", {"v": 0}, None))
    >>> rows
    {'a': {'v': 2}}
    """
    if out.kind is OutputKind.DELETE:
        rows.pop(out.key, None)
    elif out.kind is not OutputKind.BOUNDARY:
        rows[out.key] = dict(out.row)


class ResultTable:
    """Applies an output stream, in order, to a table ``eid -> key -> row``; what a
    subscriber (the console, a results table) sees. Inconsistent revisions raise.

    >>> from datetime import UTC, datetime
    >>> t, tab = datetime(2026, 1, 1, tzinfo=UTC), ResultTable()
    >>> tab.apply(Output("r", "e1", t, OutputKind.INSERT, 1, "k", {"v": 1}, None))
    >>> tab.apply(Output("r", "e1", t, OutputKind.UPDATE, 2, "k", {"v": 2}, None))
    >>> tab.rows("e1")
    {'k': {'v': 2}}
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, Row]] = {}
        self.closed: set[str] = set()
        self.last_seq: dict[str, int] = {}

    def apply(self, out: Output) -> None:
        table = self.tables.setdefault(out.eid, {})
        if out.eid in self.closed:
            raise RevisionError(f"{out.kind.value} for event {out.eid!r} after its boundary")
        if out.seq <= self.last_seq.get(out.eid, 0):
            raise RevisionError(f"seq {out.seq} for event {out.eid!r} is not after {self.last_seq[out.eid]}")
        self.last_seq[out.eid] = out.seq
        if out.kind is OutputKind.BOUNDARY:
            self.closed.add(out.eid)
            return
        if out.kind is OutputKind.INSERT and out.key in table:
            raise RevisionError(f"insert of key {out.key!r} of event {out.eid!r} already present")
        if out.kind is not OutputKind.INSERT and out.key not in table:
            raise RevisionError(f"{out.kind.value} of key {out.key!r} of event {out.eid!r} never inserted")
        apply_revision(table, out)

    def rows(self, eid: str) -> dict[str, Row]:
        return dict(self.tables.get(eid, {}))


class _Event:
    """What a downstream operator keeps for one open event."""

    __slots__ = ("ts", "inputs", "emitted", "covered")

    def __init__(self, ts: datetime) -> None:
        self.ts = ts
        self.inputs: dict[str, Row] = {}
        self.emitted: dict[str, Row] = {}
        self.covered: Interval | None = None


class _RevisionOperator(ABC):
    """Per-event state, boundary handling, sequence numbers and change emission."""

    def __init__(self, name: str, ordered_boundaries: bool = False) -> None:
        self.name = name
        self.ordered_boundaries = ordered_boundaries
        self.events: dict[str, _Event] = {}
        self.seq: dict[str, int] = {}
        self.closed: set[str] = set()
        self.boundary_ts: datetime | None = None
        self.late = 0

    def on_output(self, out: Output) -> list[Output]:
        if out.kind is OutputKind.BOUNDARY:
            return self._boundary(out)
        if out.eid in self.closed or (self.ordered_boundaries and self.boundary_ts is not None
                                      and out.event_ts < self.boundary_ts):
            self.late += 1
            return []
        ev = self.events.get(out.eid)
        if ev is None:
            ev = self.events[out.eid] = _Event(out.event_ts)
        if out.covered is not None:
            ev.covered = out.covered
        if out.kind is OutputKind.DELETE:
            old = ev.inputs.pop(out.key, None)
        else:
            old = ev.inputs.get(out.key)
            ev.inputs[out.key] = out.row
        return self._changed(out.eid, ev, out.key, old)

    @abstractmethod
    def _changed(self, eid: str, ev: _Event, key: str, old: Row | None) -> list[Output]:
        """Input row ``key`` of event ``eid`` changed from ``old`` to ``ev.inputs.get(key)``."""

    def _boundary(self, out: Output) -> list[Output]:
        drop = {out.eid}
        if self.ordered_boundaries:
            drop |= {e for e, ev in self.events.items() if ev.ts < out.event_ts}
            if self.boundary_ts is None or out.event_ts > self.boundary_ts:
                self.boundary_ts = out.event_ts
        for eid in drop:
            self.events.pop(eid, None)
            self.closed.add(eid)
        self._pruned(out.event_ts)
        seq = self._next(out.eid)
        for eid in drop:
            self.seq.pop(eid, None)
        return [Output(self.name, out.eid, out.event_ts, OutputKind.BOUNDARY, seq, "", dict(out.row), None)]

    def _pruned(self, ts: datetime) -> None:
        """Hook: drop operator-specific state once a boundary at ``ts`` arrived."""
        return None

    def _next(self, eid: str) -> int:
        self.seq[eid] = self.seq.get(eid, 0) + 1
        return self.seq[eid]

    def _diff(self, eid: str, ev: _Event, key: str, new: Row | None) -> list[Output]:
        """Emit what changes ``ev.emitted[key]`` into ``new`` (None: absent)."""
        old = ev.emitted.get(key)
        if new is None and old is None or (new is not None and old is not None and dict(new) == dict(old)):
            return []
        if new is None:
            del ev.emitted[key]
            kind, row = OutputKind.DELETE, old
        else:
            kind = OutputKind.INSERT if old is None else OutputKind.UPDATE
            ev.emitted[key] = row = dict(new)
        return [Output(self.name, eid, ev.ts, kind, self._next(eid), key, row, ev.covered)]

    def state_size(self) -> int:
        """Rows held in memory (inputs plus emitted), over all open events."""
        return sum(len(ev.inputs) + len(ev.emitted) for ev in self.events.values())


class RevisionFilter(_RevisionOperator):
    """Selection over a revised stream: a row that starts passing is inserted, one that
    stops passing is deleted, one that keeps passing is updated."""

    def __init__(self, name: str, predicate: Callable[[Row], bool], ordered_boundaries: bool = False) -> None:
        super().__init__(name, ordered_boundaries)
        self.predicate = predicate

    def _changed(self, eid: str, ev: _Event, key: str, old: Row | None) -> list[Output]:
        row = ev.inputs.pop(key, None)  # what was emitted is all the state a filter needs
        passing = row is not None and bool(self.predicate(row))
        return self._diff(eid, ev, key, row if passing else None)


_AGGS: dict[str, Callable[[list[Any]], Any]] = {
    "count": len,
    "sum": lambda v: sum(v) if v else None,
    "avg": lambda v: sum(v) / len(v) if v else None,
    "min": lambda v: min(v) if v else None,
    "max": lambda v: max(v) if v else None,
    "count_distinct": lambda v: len(set(v)),
}


class RevisionAggregate(_RevisionOperator):
    """Group-by aggregate per event over a revised stream.

    ``aggs`` maps an output column to ``(function, input column)``; functions are
    count, sum, avg, min, max and count_distinct (``count`` with column None counts
    rows). It keeps the event's input rows, so any revision, including one that moves a
    row to another group or removes the maximum, recomputes the affected groups exactly.

    >>> from datetime import UTC, datetime
    >>> t = datetime(2026, 1, 1, tzinfo=UTC)
    >>> a = RevisionAggregate("per_node", ("node",), {"worst": ("max", "cpu")})
    >>> _ = a.on_output(Output("r", "e1", t, OutputKind.INSERT, 1, "p1", {"node": "n1", "cpu": 90}, None))
    >>> [(o.kind.value, o.row) for o in a.on_output(Output("r", "e1", t, OutputKind.UPDATE, 2, "p1",
    ...                                                    {"node": "n1", "cpu": 10}, None))]
    [('update', {'node': 'n1', 'worst': 10})]
    """

    def __init__(self, name: str, group_by: tuple[str, ...], aggs: Mapping[str, tuple[str, str | None]],
                 ordered_boundaries: bool = False) -> None:
        super().__init__(name, ordered_boundaries)
        for out, (fn, _col) in aggs.items():
            if fn not in _AGGS:
                raise RevisionError(f"aggregate {fn!r} for column {out!r} is not one of {sorted(_AGGS)}")
        self.group_by, self.aggs = tuple(group_by), dict(aggs)

    def _group(self, row: Row) -> str:
        from recall.aggregate import group_key

        try:
            return group_key(row[c] for c in self.group_by)
        except KeyError as exc:
            raise RevisionError(f"{self.name}: row {dict(row)!r} lacks group column {exc.args[0]!r}") from None

    def _changed(self, eid: str, ev: _Event, key: str, old: Row | None) -> list[Output]:
        row = ev.inputs.get(key)
        groups = {self._group(r) for r in (old, row) if r is not None}
        out: list[Output] = []
        for g in sorted(groups):
            members = [r for r in ev.inputs.values() if self._group(r) == g]
            if not members:
                out += self._diff(eid, ev, g, None)
                continue
            value = {c: members[0][c] for c in self.group_by}
            for col, (fn, src) in self.aggs.items():
                vals = [1 for _ in members] if src is None else [r[src] for r in members if r.get(src) is not None]
                value[col] = _AGGS[fn](vals)
            out += self._diff(eid, ev, g, value)
        return out


class RevisionJoin(_RevisionOperator):
    """Equi-join of a revised recall stream with a live stream (M 4.6, fig. 12).

    Each recall row joins with at most one row of the other stream per join key:

    - ``analysis="event"`` (*event analysis*): the other stream's row valid at the
      event's time, the latest one with ``ts <= event_ts`` (and, with ``validity``, no
      older than ``event_ts - validity``). Time stands still for the event: a revision
      arriving later still joins with what was valid when the event happened.
    - ``analysis="present"`` (*present analysis*): the other stream's most recent row,
      whatever its time. A revision joins with the newest data, and a newer row on the
      other stream updates the joined rows of every open event.

    Output rows are the recall row's columns plus the other row's (a clashing name gets
    the prefix ``other_``); the output key is the recall row's key.
    """

    def __init__(self, name: str, on: str | tuple[str, str], analysis: str = "event", other_ts: str = "ts",
                 validity=None, ordered_boundaries: bool = False) -> None:
        super().__init__(name, ordered_boundaries)
        if analysis not in ("event", "present"):
            raise RevisionError(f"join {name!r}: analysis must be 'event' or 'present', got {analysis!r}")
        self.left_on, self.right_on = (on, on) if isinstance(on, str) else on
        self.analysis, self.other_ts, self.validity = analysis, other_ts, validity
        self.other: dict[Any, list[tuple[datetime, int, Row]]] = {}
        self._arrivals = 0

    def on_other(self, row: Row) -> list[Output]:
        """One tuple of the other stream; returns the joined rows it inserts or revises."""
        from recall.operator import as_utc

        if self.right_on not in row or self.other_ts not in row:
            raise RevisionError(f"{self.name}: other-stream row {dict(row)!r} lacks "
                                f"{self.right_on!r} or {self.other_ts!r}")
        jk, ts = row[self.right_on], as_utc(row[self.other_ts], f"{self.name} other-stream {self.other_ts}")
        self._arrivals += 1
        rows = self.other.setdefault(jk, [])
        rows.append((ts, self._arrivals, dict(row)))
        rows.sort(key=lambda r: (r[0], r[1]))
        if self.analysis == "present":
            del rows[:-1]
        out: list[Output] = []
        for eid, ev in list(self.events.items()):
            for key, left in list(ev.inputs.items()):
                if left.get(self.left_on) == jk:
                    out += self._diff(eid, ev, key, self._joined(ev, left))
        return out

    def match(self, event_ts: datetime, jk: Any) -> Row | None:
        """The other-stream row a recall row of an event at ``event_ts`` joins with."""
        rows = self.other.get(jk)
        if not rows:
            return None
        if self.analysis == "present":
            return rows[-1][2]
        for ts, _, row in reversed(rows):
            if ts <= event_ts:
                if self.validity is not None and event_ts - ts > self.validity:
                    return None
                return row
        return None

    def _joined(self, ev: _Event, left: Row) -> Row | None:
        right = self.match(ev.ts, left.get(self.left_on))
        if right is None:
            return None
        out = dict(left)
        for c, v in right.items():
            out[f"other_{c}" if c in left else c] = v
        return out

    def _changed(self, eid: str, ev: _Event, key: str, old: Row | None) -> list[Output]:
        left = ev.inputs.get(key)
        return self._diff(eid, ev, key, None if left is None else self._joined(ev, left))

    def _pruned(self, ts: datetime) -> None:
        if self.analysis == "present":
            return
        cutoff = min([ts, *(ev.ts for ev in self.events.values())])
        for jk, rows in list(self.other.items()):
            older = [i for i, r in enumerate(rows) if r[0] <= cutoff]
            if len(older) > 1:  # keep the one still valid at the cutoff
                del rows[: older[-1]]
            if not rows:
                self.other.pop(jk)

    def state_size(self) -> int:
        return super().state_size() + sum(len(r) for r in self.other.values())


class Chain:
    """Downstream operators in sequence (a Recall's output -> op1 -> op2 ...), with the
    same verbs: ``on_output`` feeds the first operator, ``on_other(name, row)`` feeds
    the named join's other stream; outputs flow through the operators after it.

    >>> from datetime import UTC, datetime
    >>> t = datetime(2026, 1, 1, tzinfo=UTC)
    >>> c = Chain(RevisionAggregate("n", ("node",), {"k": ("count", None)}), RevisionFilter("two", lambda r: r["k"] >= 2))
    >>> _ = c.on_output(Output("r", "e", t, OutputKind.INSERT, 1, "p1", {"node": "a"}, None))
    >>> [(o.operator, o.kind.value, o.row) for o in c.on_output(Output("r", "e", t, OutputKind.INSERT, 2, "p2",
    ...                                                                  {"node": "a"}, None))]
    [('two', 'insert', {'node': 'a', 'k': 2})]
    """

    def __init__(self, *ops: _RevisionOperator) -> None:
        if not ops:
            raise RevisionError("a chain needs at least one operator")
        names = [o.name for o in ops]
        if len(set(names)) != len(names):
            raise RevisionError(f"operator names in a chain must be unique, got {names}")
        self.ops = ops

    def on_output(self, out: Output) -> list[Output]:
        return self._through([out], 0)

    def on_other(self, name: str, row: Row) -> list[Output]:
        for i, op in enumerate(self.ops):
            if op.name == name:
                if not isinstance(op, RevisionJoin):
                    raise RevisionError(f"operator {name!r} is not a join; it has no other stream")
                return self._through(op.on_other(row), i + 1)
        raise RevisionError(f"no operator named {name!r} in the chain ({[o.name for o in self.ops]})")

    def _through(self, outs: list[Output], start: int) -> list[Output]:
        for op in self.ops[start:]:
            outs = [o2 for o in outs for o2 in op.on_output(o)]
        return outs

    def state_size(self) -> int:
        return sum(o.state_size() for o in self.ops)
