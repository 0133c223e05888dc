"""Alerts bad data hid: windows a correction (or a retraction) makes cross their threshold.

A stored polynomial exists only for a result that was emitted, so a window the bad data
kept under its threshold has none. For a window event-query over one source (H 5: an
insertion is maintained by finding the candidate answers it can create), the windows a
changed row falls in (before and after the correction: a corrected key moves it) are
recomputed with every active flag applied, and a window that now holds and has no
standing alert is a hidden alert. Late rows (inserted, not yet archived) join the
windows they fall in the same way.

For plain aggregates (:func:`pushable`) no archived row leaves PostgreSQL: it gives each
window's partials over its archived rows but the removed and corrected ones
(:func:`archive_aggregator`, one query; one more reads, by id, the rows an earlier flag
corrected), and the rows the change adds (the corrected rows at their new values, the late
rows) are grouped into the same windows with numpy and merged in
(:mod:`moirae.retract.partials`). Otherwise the windows' rows are read
(:func:`archive_reader`) and recomputed (``ananke/poly_maint.py:recompute``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import numpy as np

from ananke.ids import from_micros, micros
from archive.names import quote
from moirae.retract.partials import Partials, counts_rows, of_rows, value_matrix

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Row = tuple[int, datetime, Mapping[str, Any]]


def hidden_windows(plan, read: Callable[[Any, list[tuple]], list[tuple[int, dict[str, Any]]]],
                   rows: Iterable[Row], removed: set[int], corrected: Mapping[int, Mapping[str, Any]],
                   alerted: set[tuple], aggregate: Callable | None = None,
                   inserted: Iterable[Row] = ()) -> list[tuple[tuple, dict[str, Any]]]:
    """``((keys, lo, hi), aggregates)`` of each window ``rows`` (source id, time, values
    as archived) or ``inserted`` (late rows, in the same form, not in the archive) fall in
    that holds under the flags and is not in ``alerted`` (the windows of the query's
    standing alerts, as ``(keys, lo, hi)``), sorted by time. ``read(plan, windows)`` gives
    the archived rows (source id, values) in any of those windows (:func:`archive_reader`),
    each once; ``aggregate`` (:func:`archive_aggregator`), when given and the plan is
    :func:`pushable`, replaces the read by PostgreSQL's partial aggregates."""
    from ananke.poly_maint import recompute

    if plan is None or plan.kind != "window" or plan.degree != 1 or not plan.streams:
        return []
    rows, inserted = list(rows), list(inserted)
    if not rows and not inserted:
        return []
    moved = [(sid, ts, {**vals, **corrected[sid]}) for sid, ts, vals in rows if sid in corrected]
    # windows as (keys, start in µs) until the answer: no datetime per window touched
    touched = _window_starts(plan, rows) | _window_starts(plan, moved) | _window_starts(plan, inserted)
    todo = list(touched - {(k, micros(lo)) for k, lo, _hi in alerted})
    if not todo:
        return []
    size = plan.size_us
    if aggregate is not None and pushable(plan):
        found = _pushed(plan, aggregate, todo, rows, removed, corrected, inserted)
        return [((k, from_micros(lo), from_micros(lo + size)), res)
                for (k, lo), res in sorted(found, key=lambda x: (x[0][1], repr(x[0][0])))]
    windows = [(k, from_micros(lo), from_micros(lo + size)) for k, lo in todo]
    asked = set(windows)
    members = read(plan, windows)
    fixed = [{**vals, **corrected.get(sid, {})} for sid, vals in members if sid not in removed]
    fixed += [{**vals, plan.ts: ts} for _sid, ts, vals in inserted]
    out = []
    for w, res in recompute(plan, fixed).items():
        if w in asked and res.get("_holds"):
            out.append((w, {k: v for k, v in res.items() if not k.startswith("_")}))
    return sorted(out, key=lambda x: (x[0][1], repr(x[0][0])))


def _keys_of(plan) -> Callable[[Mapping[str, Any]], tuple]:
    """A row's values of the plan's keys, as a tuple."""
    if not plan.keys:
        return lambda v: ()
    get = itemgetter(*plan.keys)
    if len(plan.keys) == 1:
        return lambda v: (get(v),)
    return get


def _window_starts(plan, rows: Sequence[Row]) -> set[tuple[tuple, int]]:
    """``(keys, start in µs)`` of every window of ``plan`` one of ``rows`` falls in (the
    alignment of ``ananke/poly_maint.py:windows_of``)."""
    from ananke.poly_maint import window_bounds

    if not rows:
        return set()
    keys = _keys_of(plan)
    size, slide = plan.size_us, plan.slide_us
    if size == slide:  # tumbling: one window a row
        return {(keys(v), t - t % size) for t, v in ((micros(ts), v) for _, ts, v in rows)}
    return {(keys(v), lo) for _, ts, v in rows for lo, _hi in window_bounds(micros(ts), size, slide)}


def _pushed(plan, aggregate: Callable, todo: list[tuple[tuple, int]], rows: list[Row], removed: set[int],
            corrected: Mapping[int, Mapping[str, Any]], inserted: list[Row]) -> list[tuple[tuple, dict[str, Any]]]:
    """``((keys, start in µs), aggregates)`` of the windows of ``todo`` that hold, by
    partial aggregates (module doc)."""
    from ananke.poly_condition import Condition
    from ananke.poly_maint import window_bounds

    known = {sid: (ts, vals) for sid, ts, vals in rows if sid in corrected and sid not in removed}
    wanted = sorted(sid for sid in corrected if sid not in known and sid not in removed)
    base, fetched = aggregate(plan, todo, set(removed) | set(corrected), wanted)
    known.update({sid: (ts, vals) for sid, ts, vals in fetched if sid in corrected and sid not in removed})
    added = [(ts, {**vals, **corrected[sid]}) for sid, (ts, vals) in known.items()]
    added += [(ts, vals) for _sid, ts, vals in inserted]
    if added:  # the rows the change adds, each into its window(s) among those asked for
        where = {w: i for i, w in enumerate(todo)}
        keys = _keys_of(plan)
        index, members = [], []
        for ts, vals in added:
            k = keys(vals)
            for lo, _hi in window_bounds(micros(ts), plan.size_us, plan.slide_us):
                i = where.get((k, lo))
                if i is not None:
                    index.append(i)
                    members.append(vals)
        base = base.merge(of_rows(plan, np.array(index, dtype=np.int64), value_matrix(plan, members), len(todo)))
    conds = [Condition(c) for c in plan.conditions]
    out = []
    for w, res in zip(todo, base.values(plan), strict=True):
        if res is None:
            continue
        row = {**dict(zip(plan.keys, w[0], strict=True)), **res}
        if all(c.holds(row) for c in conds):
            out.append((w, res))
    return out


def archive_reader(archive, stream: str, ts_col: str) -> Callable[[Any, list[tuple]], list]:
    """``read(plan, windows)`` for :func:`hidden_windows`: (source id, values as their
    columns' Python types, the event time a datetime) of ``stream``'s archived rows inside
    any of the ``(keys, lo, hi)`` windows, each once, in one query: by range (an index on
    the keys and the time serves each window) and, for tumbling windows, by bucket number
    too (a hash join, one pass over the time range, when there is no such index)."""
    def read(plan, windows: list[tuple]) -> list[tuple[int, dict[str, Any]]]:
        if not windows:
            return []
        keys = plan.keys
        ts = f"t.{quote(ts_col)}"
        cols = "".join(f", k{i}" for i in range(len(keys)))
        match = "".join(f" AND t.{quote(k)}::text = w.k{i}" for i, k in enumerate(keys))
        starts = np.array([micros(w[1]) for w in windows], dtype=np.int64)
        ends = np.array([micros(w[2]) for w in windows], dtype=np.int64)
        lo, hi = from_micros(starts.min()), from_micros(ends.max())
        # the range lets an index on (keys, time) serve each window; for tumbling windows
        # the bucket number also lets a hash join serve them all in one scan without one
        on = f"{ts} >= w.lo AND {ts} < w.hi{match}"
        unnest = ", ".join(["%s::timestamptz[]", "%s::timestamptz[]", *["%s::text[]"] * len(keys)])
        params: list[Any] = [_times(starts), _times(ends), *[_array(str(w[0][i]) for w in windows)
                                                              for i in range(len(keys))]]
        names = f"lo, hi{cols}"
        tumbling = plan.size_us == plan.slide_us
        if tumbling:
            size = int(plan.size_us)
            on = f"w.b = floor(extract(epoch from {ts}) * 1000000 / {size})::bigint AND {on}"
            unnest += ", %s::bigint[]"
            names += ", b"
            params.append(_ints(starts // size))
        once = "" if tumbling else "DISTINCT ON (t._sid) "  # a row falls in one tumbling window only
        with archive.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {once}t.* FROM {quote(stream)} t JOIN (SELECT * FROM unnest({unnest}) AS w({names})) w "
                        f"ON {on} WHERE {ts} >= %s AND {ts} < %s", (*params, lo, hi))
            columns = [d.name for d in cur.description]
            got = cur.fetchall()
        at = columns.index("_sid")
        kept = [(i, c) for i, c in enumerate(columns) if c not in ("_sid", "_batch")]
        return [(int(r[at]), {c: r[i] for i, c in kept}) for r in got]
    return read


def pushable(plan) -> bool:
    """Whether PostgreSQL can compute ``plan``'s window aggregates itself: no filter
    before the aggregate, each aggregate a sum, count, avg, min or max of a plain column
    (or ``count(1)``), every condition compiled."""
    from ananke.poly_condition import Condition

    if plan.pre or not plan.aggs:
        return False
    for a in plan.aggs:
        if a.fn not in ("sum", "count", "avg", "min", "max"):
            return False
        if a.column is None and not (a.fn == "count" and a.arg == "1"):
            return False
    return all(Condition(c).compiled for c in plan.conditions)


def archive_aggregator(archive, stream: str, ts_col: str) -> Callable:
    """``aggregate(plan, windows, excluded, fetch)`` for :func:`hidden_windows`:
    :class:`~moirae.retract.partials.Partials` of each of ``windows`` (``(keys, start in
    µs)``, each the plan's size long) over ``stream``'s
    archived rows but the ``excluded`` source ids, computed by PostgreSQL in one query,
    and the archived rows ``(source id, time, values of the keys and the aggregated
    columns)`` of the source ids in ``fetch`` inside the windows' time range. With a btree
    index on the keys and the time (on the stream's table, so on every chunk) each window
    is one index range scan; without, tumbling windows are matched by their bucket
    (``date_bin``) in one hash join over the range. The windows and ids go as one array
    literal each (the query's text stays small and is parsed once)."""
    indexed: list[bool] = []

    def aggregate(plan, windows: list[tuple], excluded: set[int], fetch: Sequence[int] = ()) -> tuple[Partials, list]:
        out = Partials.empty(len(windows), len(plan.aggs))
        if not windows:
            return out, []
        keys, ts = plan.keys, f"t.{quote(ts_col)}"
        cols = "".join(f", k{i}" for i in range(len(keys)))
        match = "".join(f" AND t.{quote(k)}::text = w.k{i}" for i, k in enumerate(keys))
        exprs = []
        for a in plan.aggs:
            if counts_rows(a):
                continue
            c = f"t.{quote(a.column)}"
            exprs += [f"count({c})", f"coalesce(sum({c})::float8, 0)" if a.fn in ("sum", "avg") else "0::float8",
                      f"min({c})::float8" if a.fn == "min" else "NULL::float8",
                      f"max({c})::float8" if a.fn == "max" else "NULL::float8"]
        agg_cols = "".join(f", {e}" for e in exprs)
        unnest = ", ".join(["%s::int[]", "%s::timestamptz[]", "%s::timestamptz[]", *["%s::text[]"] * len(keys)])
        sub = f"SELECT * FROM unnest({unnest}) AS w(i, lo, hi{cols})"
        starts = np.array([w[1] for w in windows], dtype=np.int64)
        params: list[Any] = [_ints(range(len(windows))), _times(starts), _times(starts + plan.size_us),
                             *[_array(str(w[0][i]) for w in windows) for i in range(len(keys))]]
        on = f"{ts} >= w.lo AND {ts} < w.hi{match}"
        lo, hi = from_micros(starts.min()), from_micros(starts.max() + plan.size_us)
        gone = _ints(sorted(int(r) for r in excluded))
        with archive.db.connection() as conn, conn.cursor() as cur:
            if not indexed:
                indexed.append(_keys_time_index(cur, stream, [*keys, ts_col]))
            # the excluded ids are tested above the scan of the chunks (OFFSET 0 keeps the test
            # out of them): the planner then estimates its selectivity once, not per chunk and id
            if indexed[0]:  # one index range scan per window
                cur.execute(f"SELECT w.i, a.* FROM ({sub}) w CROSS JOIN LATERAL (SELECT count(*) AS n{agg_cols} "
                            f"FROM (SELECT * FROM {quote(stream)} t WHERE {on} OFFSET 0) t "
                            "WHERE NOT (t._sid = ANY(%s::bigint[]))) a WHERE a.n > 0", (*params, gone))
            else:
                if plan.size_us == plan.slide_us:  # the bucket too: a hash join, one pass over the range
                    size = int(plan.size_us)
                    cur.execute("SELECT current_setting('server_version_num')::int >= 140000")
                    if cur.fetchone()[0]:  # date_bin: timestamp arithmetic, no numeric per row
                        on = f"w.lo = date_bin('{size} microseconds', {ts}, '{_EPOCH.isoformat()}') AND {on}"
                    else:
                        on = (f"floor(extract(epoch from w.lo) * 1000000 / {size})::bigint = "
                              f"floor(extract(epoch from {ts}) * 1000000 / {size})::bigint AND {on}")
                cur.execute(f"SELECT w.i, count(*){agg_cols} FROM (SELECT * FROM {quote(stream)} t "
                            f"WHERE {ts} >= %s AND {ts} < %s OFFSET 0) t JOIN ({sub}) w ON {on} "
                            "WHERE NOT (t._sid = ANY(%s::bigint[])) GROUP BY w.i", (lo, hi, *params, gone))
            got = cur.fetchall()
            fetched = []
            if fetch:
                names = [*dict.fromkeys([*keys, *(a.column for a in plan.aggs if not counts_rows(a))])]
                cur.execute(f"SELECT t._sid, {ts}{''.join(f', t.{quote(c)}' for c in names)} FROM {quote(stream)} t "
                            f"WHERE {ts} >= %s AND {ts} < %s AND t._sid = ANY(%s::bigint[])",
                            (lo, hi, _ints(fetch)))
                fetched = [(int(r[0]), r[1], dict(zip(names, r[2:], strict=True))) for r in cur.fetchall()]
        if got:
            data = np.array([r[1:] for r in got], dtype=np.float64).reshape(len(got), -1)
            at = np.array([r[0] for r in got], dtype=np.int64)
            out.n[at] = data[:, 0].astype(np.int64)
            j = 1
            for k, a in enumerate(plan.aggs):
                if counts_rows(a):
                    continue
                out.cnt[at, k] = data[:, j].astype(np.int64)
                out.sum[at, k] = data[:, j + 1]
                if a.fn == "min":
                    out.lo[at, k] = np.where(np.isnan(data[:, j + 2]), np.inf, data[:, j + 2])
                if a.fn == "max":
                    out.hi[at, k] = np.where(np.isnan(data[:, j + 3]), -np.inf, data[:, j + 3])
                j += 4
        return out, fetched
    return aggregate


def _array(values: Iterable[str]) -> str:
    """``values`` as one PostgreSQL text array literal (elements quoted: any text is safe)."""
    quoted: dict[str, str] = {}
    out = []
    for v in values:
        q = quoted.get(v)
        if q is None:
            q = quoted[v] = '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(q)
    return "{" + ",".join(out) + "}"


def _ints(values: Iterable[int]) -> str:
    """Integers as one PostgreSQL array literal."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def _times(us: np.ndarray) -> str:
    """Microseconds since the epoch as one PostgreSQL timestamptz array literal (UTC)."""
    text = np.datetime_as_string(us.astype("datetime64[us]"), unit="us")
    return "{" + ",".join(f"{t}+00" for t in text.tolist()) + "}"


def _keys_time_index(cur, stream: str, columns: list[str]) -> bool:
    """Whether ``stream`` (its parent table: every chunk then has it) has a btree index
    leading with ``columns`` (the window keys, then the event time)."""
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_am m ON m.oid = c.relam WHERE i.indrelid = to_regclass(%s) AND m.amname = 'btree' "
                "AND (SELECT array_agg(a.attname::text ORDER BY k.n) FROM unnest(i.indkey::int2[]) WITH ORDINALITY "
                "k(att, n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.att WHERE k.n <= %s) "
                "= %s::text[])", (quote(stream), len(columns), columns))
    return bool(cur.fetchone()[0])


def hidden_rows(plan, rows: Iterable[tuple[int, datetime, Mapping[str, Any]]], removed: set[int],
                corrected: Mapping[int, Mapping[str, Any]], alerted: set[int]) -> list[tuple[int, dict[str, Any]]]:
    """For a filter over one source (a ``row`` plan of degree 1): ``(source id, corrected
    row)`` of each corrected row of ``rows`` that now passes the filter and fed no
    standing alert (``alerted``: the source ids of those)."""
    from ananke.poly_maint import row_holds

    if plan is None or plan.kind != "row" or plan.degree != 1:
        return []
    out = []
    for sid, ts, vals in rows:
        if sid in corrected and sid not in removed and sid not in alerted:
            row = {**vals, **corrected[sid], plan.ts or "ts": ts}
            if row_holds(plan, row):
                out.append((sid, row))
    return out
