"""Alerts bad data hid: windows a correction (or a retraction) makes cross their threshold.

A stored polynomial exists only for a result that was emitted, so a window the bad data
kept under its threshold has none. For a window event-query over one source (H 5: an
insertion is maintained by finding the candidate answers it can create), the windows a
corrected row falls in (before and after the correction: a corrected key moves it) are
recomputed from the archive's rows of those windows with every active flag applied
(``ananke/poly_maint.py:recompute``); a window that now holds and has no standing alert
is a hidden alert.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from archive.names import quote

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def hidden_windows(plan, read: Callable[[Any, list[tuple]], list[tuple[int, dict[str, Any]]]],
                   rows: Iterable[tuple[int, datetime, Mapping[str, Any]]],
                   removed: set[int], corrected: Mapping[int, Mapping[str, Any]],
                   alerted: set[tuple], aggregate: Callable | None = None) -> list[tuple[tuple, dict[str, Any]]]:
    """``((keys, lo, hi), aggregates)`` of each window ``rows`` (source id, time, values
    as archived) fall in that holds under the flags and is not in ``alerted`` (the
    windows of the query's standing alerts, as ``(keys, lo, hi)``). ``read(plan,
    windows)`` gives the source rows (source id, values) in any of those windows
    (:func:`archive_reader`), each once."""
    from ananke.poly_condition import Condition
    from ananke.poly_maint import recompute, windows_of

    if plan is None or plan.kind != "window" or plan.degree != 1 or not plan.streams:
        return []
    rows = list(rows)
    if not rows:
        return []
    touched = {w for _, ts, vals in rows for w in windows_of(plan, [{**vals, plan.ts: ts}])}
    touched |= {w for sid, ts, vals in rows if sid in corrected
                for w in windows_of(plan, [{**vals, **corrected[sid], plan.ts: ts}])}
    todo = sorted(touched - alerted, key=lambda w: (w[1], repr(w[0])))
    if not todo:
        return []
    if aggregate is not None and pushable(plan) and not any(sid in corrected for sid, _, _ in rows):
        # removals only, plain aggregates: PostgreSQL aggregates the windows (no row leaves it)
        conds = [Condition(c) for c in plan.conditions]
        out = []
        for w, res in aggregate(plan, todo, removed).items():
            row = {**dict(zip(plan.keys, w[0], strict=True)), **res}
            if all(c.holds(row) for c in conds):
                out.append((w, res))
        return sorted(out, key=lambda x: (x[0][1], repr(x[0][0])))
    members = read(plan, todo)
    fixed = [{**vals, **corrected.get(sid, {})} for sid, vals in members if sid not in removed]
    out = []
    for w, res in recompute(plan, fixed).items():
        if w in touched and res.get("_holds") and w not in alerted:
            out.append((w, {k: v for k, v in res.items() if not k.startswith("_")}))
    return sorted(out, key=lambda x: (x[0][1], repr(x[0][0])))


def archive_reader(archive, stream: str, ts_col: str) -> Callable[[Any, list[tuple]], list]:
    """``read(plan, windows)`` for :func:`hidden_windows`: (source id, values with the
    event time as a datetime) of ``stream``'s archived rows inside any of the
    ``(keys, lo, hi)`` windows, in one query: by range (an index on the keys and the time
    serves each window) and, for tumbling windows, by bucket number too (a hash join,
    one pass over the time range, when there is no such index)."""
    def read(plan, windows: list[tuple]) -> list[tuple[int, dict[str, Any]]]:
        if not windows:
            return []
        keys = plan.keys
        ts = f"t.{quote(ts_col)}"
        cols = "".join(f", unnest(%s::text[]) AS k{i}" for i in range(len(keys)))
        match = "".join(f" AND t.{quote(k)}::text = w.k{i}" for i, k in enumerate(keys))
        args: list[Any] = [[str(w[0][i]) for w in windows] for i in range(len(keys))]
        lo, hi = min(w[1] for w in windows), max(w[2] for w in windows)
        # the range lets an index on (keys, time) serve each window; for tumbling windows
        # the bucket number also lets a hash join serve them all in one scan without one
        on = f"{ts} >= w.lo AND {ts} < w.hi{match}"
        sub = f"SELECT unnest(%s::timestamptz[]) AS lo, unnest(%s::timestamptz[]) AS hi{cols}"
        params = [[w[1] for w in windows], [w[2] for w in windows], *args]
        if plan.size_us == plan.slide_us:
            size = int(plan.size_us)
            on = f"w.b = floor(extract(epoch from {ts}) * 1000000 / {size})::bigint AND {on}"
            sub += ", unnest(%s::bigint[]) AS b"
            params.append([int((w[1] - _EPOCH) // timedelta(microseconds=1)) // size for w in windows])
        with archive.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT DISTINCT t._sid, {ts}, to_jsonb(t) - '_sid' - '_batch' FROM {quote(stream)} t "
                        f"JOIN ({sub}) w ON {on} WHERE {ts} >= %s AND {ts} < %s", (*params, lo, hi))
            return [(int(sid), {**vals, ts_col: t}) for sid, t, vals in cur.fetchall()]
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
    """``aggregate(plan, windows, removed)`` for :func:`hidden_windows`: each window's
    aggregates over ``stream``'s archived rows but the ``removed`` ones, computed by
    PostgreSQL in one query ({window: {agg name: value, "_n": rows}}; a window left with
    no row is absent). With a btree index on the keys and the time (on the stream's
    table, so on every chunk) each window is one index range scan; without, tumbling
    windows are matched by their bucket (``date_bin``) in one hash join over the range."""
    def aggregate(plan, windows: list[tuple], removed: set[int]) -> dict[tuple, dict[str, Any]]:
        if not windows:
            return {}
        keys, ts = plan.keys, f"t.{quote(ts_col)}"
        cols = "".join(f", unnest(%s::text[]) AS k{i}" for i in range(len(keys)))
        match = "".join(f" AND t.{quote(k)}::text = w.k{i}" for i, k in enumerate(keys))
        exprs = ", ".join("count(*)" if a.column is None else f"{a.fn}(t.{quote(a.column)})::float8"
                          for a in plan.aggs)
        params: list[Any] = [list(range(len(windows))), [w[1] for w in windows], [w[2] for w in windows],
                             *[[str(w[0][i]) for w in windows] for i in range(len(keys))]]
        on = f"{ts} >= w.lo AND {ts} < w.hi{match}"
        sub = f"SELECT unnest(%s::int[]) AS i, unnest(%s::timestamptz[]) AS lo, unnest(%s::timestamptz[]) AS hi{cols}"
        lo, hi = min(w[1] for w in windows), max(w[2] for w in windows)
        gone = sorted(int(r) for r in removed)
        with archive.db.connection() as conn, conn.cursor() as cur:
            if _keys_time_index(cur, stream, [*keys, ts_col]):  # one index range scan per window
                cur.execute(f"SELECT w.i, a.* FROM ({sub}) w CROSS JOIN LATERAL (SELECT count(*) AS n, {exprs} "
                            f"FROM {quote(stream)} t WHERE {on} AND NOT (t._sid = ANY(%s))) a WHERE a.n > 0",
                            (*params, gone))
            else:
                if plan.size_us == plan.slide_us:  # the bucket too: a hash join, one pass over the range
                    size = int(plan.size_us)
                    cur.execute("SELECT current_setting('server_version_num')::int >= 140000")
                    if cur.fetchone()[0]:  # date_bin: timestamp arithmetic, no numeric per row
                        on = f"w.lo = date_bin('{size} microseconds', {ts}, '{_EPOCH.isoformat()}') AND {on}"
                    else:
                        on = f"w.b = floor(extract(epoch from {ts}) * 1000000 / {size})::bigint AND {on}"
                        sub += ", unnest(%s::bigint[]) AS b"
                        params.append([int((w[1] - _EPOCH) // timedelta(microseconds=1)) // size for w in windows])
                cur.execute(f"SELECT w.i, count(*), {exprs} FROM {quote(stream)} t JOIN ({sub}) w ON {on} "
                            f"WHERE {ts} >= %s AND {ts} < %s AND NOT (t._sid = ANY(%s)) GROUP BY w.i",
                            (*params, lo, hi, gone))
            got = cur.fetchall()
        out = {}
        for i, n, *vals in got:
            w = windows[i]
            res = {"_n": int(n)}
            for a, v in zip(plan.aggs, vals, strict=True):
                res[a.name] = int(v) if a.fn == "count" and v is not None else v
            out[w] = res
        return out
    return aggregate


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
