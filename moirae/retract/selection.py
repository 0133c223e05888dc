"""Which archived source rows a retraction or a lookup names (H 4: the facts updated).

Rows are named one of three ways, exactly one at a time:

- by source id (``ids``; with ``stream`` or, without it, searched in every raw stream);
- by ``stream``, an optional ``key`` (``{"column": value}``) and a time range
  ``[start, end)`` ("sensor X was wrong from 10:00 to 10:20");
- by ``stream`` and a SQL ``predicate`` over its columns
  (:func:`moirae.retract.predicate.check_predicate`).

A lookup may also name a whole ``stream``. :func:`resolve` reads the matching rows'
source ids, event times and values from the archive; every refusal is one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from archive.names import quote
from moirae.retract.errors import BadSelection, UnknownRetractStream
from moirae.retract.predicate import check_predicate

#: at most this many rows are read for one selection (a larger one is refused)
MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class Selection:
    """A set of source rows of the archive (see the module doc)."""

    stream: str | None = None
    ids: tuple[int, ...] = ()
    key: tuple[tuple[str, Any], ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    predicate: str | None = None
    whole_stream: bool = field(default=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], allow_stream: bool = False) -> Selection:
        """From the API's / CLI's mapping: ``ids`` | ``stream`` + ``key`` + ``start`` +
        ``end`` | ``stream`` + ``predicate`` (| ``stream`` alone, when ``allow_stream``)."""
        ids = tuple(int(i) for i in (d.get("ids") or ()))
        key = d.get("key") or {}
        if not isinstance(key, Mapping):
            raise BadSelection(f"key must be a mapping of column to value, got {key!r}")
        start, end = _time(d.get("start"), "start"), _time(d.get("end"), "end")
        sel = cls(d.get("stream"), ids, tuple(sorted(key.items())), start, end, d.get("predicate") or None)
        ways = [bool(ids), bool(key) or start is not None or end is not None, sel.predicate is not None]
        if sum(ways) > 1:
            raise BadSelection("name the rows one way: ids, or key and time range, or predicate")
        if not any(ways):
            if allow_stream and sel.stream:
                return cls(sel.stream, whole_stream=True)
            raise BadSelection("no rows named: give ids, or stream with key and/or start/end, or stream with predicate")
        if not ids and not sel.stream:
            raise BadSelection("a key, time range or predicate needs a stream")
        if start is not None and end is not None and end <= start:
            raise BadSelection(f"empty time range: end {end.isoformat()} is not after start {start.isoformat()}")
        return sel

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stream": self.stream}
        if self.ids:
            out["ids"] = list(self.ids)
        if self.key:
            out["key"] = dict(self.key)
        if self.start is not None:
            out["start"] = self.start.isoformat()
        if self.end is not None:
            out["end"] = self.end.isoformat()
        if self.predicate is not None:
            out["predicate"] = self.predicate
        return out

    @property
    def follows_arrivals(self) -> bool:
        """Whether rows arriving later can match (a range or a predicate, not ids)."""
        return not self.ids


def _time(v: Any, what: str) -> datetime | None:
    if v is None or v == "":
        return None
    if isinstance(v, datetime):
        t = v
    else:
        try:
            t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        except ValueError:
            raise BadSelection(f"{what} {v!r} is not an ISO 8601 time") from None
    if t.tzinfo is None:
        raise BadSelection(f"{what} {v!r} has no time zone (add +00:00 or Z)")
    return t


def stream_spec(archive, name: str):
    """The archived stream ``name`` (its spec), or :class:`UnknownRetractStream`."""
    try:
        return archive.stream(name)
    except LookupError:
        known = ", ".join(sorted(s.name for s in archive.streams() if s.kind == "raw")) or "none"
        raise UnknownRetractStream(f"unknown stream {name!r} (raw streams: {known})") from None


def where(archive, sel: Selection) -> tuple[str, list[Any]]:
    """The WHERE condition (with its parameters) naming ``sel``'s rows in its stream's table."""
    spec = stream_spec(archive, sel.stream)
    conds, args = [], []
    if sel.ids:
        conds.append("_sid = ANY(%s)")
        args.append(list(sel.ids))
    for col, value in sel.key:
        if col not in spec.columns:
            raise BadSelection(f"stream {spec.name!r} has no column {col!r} (columns: {', '.join(spec.columns)})")
        conds.append(f"{quote(col)} = %s")
        args.append(value)
    if sel.start is not None:
        conds.append(f"{quote(spec.ts_col)} >= %s")
        args.append(sel.start)
    if sel.end is not None:
        conds.append(f"{quote(spec.ts_col)} < %s")
        args.append(sel.end)
    if sel.predicate is not None:
        conds.append(f"({check_predicate(sel.predicate, spec.columns, spec.ts_col)})")
    return (" AND ".join(conds) or "true"), args


def resolve(archive, sel: Selection, limit: int = MAX_ROWS) -> list[tuple[str, int, datetime, dict[str, Any]]]:
    """(stream, source id, event time, values) of every row ``sel`` names, by time.

    Ids without a stream are searched in every raw stream. More than ``limit`` rows is
    refused (:class:`BadSelection`)."""
    if sel.stream is None:
        out = []
        for spec in archive.streams():
            if spec.kind == "raw":
                out += resolve(archive, Selection(spec.name, sel.ids), limit)
        return sorted(out, key=lambda r: (r[2], r[1]))
    spec = stream_spec(archive, sel.stream)
    cond, args = where(archive, sel)
    with archive.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT _sid, {quote(spec.ts_col)}, to_jsonb(t) - '_sid' - '_batch' FROM {quote(spec.name)} t "
                    f"WHERE {cond} ORDER BY {quote(spec.ts_col)}, _sid LIMIT %s", (*args, limit + 1))
        rows = cur.fetchall()
    if len(rows) > limit:
        raise BadSelection(f"the selection names more than {limit} rows of stream {spec.name!r}; narrow it")
    return [(spec.name, int(sid), ts, vals) for sid, ts, vals in rows]


def archived_rows(archive, stream: str) -> int:
    """Rows of ``stream`` in the archive now (the chunk catalog's count)."""
    return sum(c.rows for c in archive.chunks(stream))
