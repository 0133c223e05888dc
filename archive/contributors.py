"""Reading back the source tuples of live windows (ananke.digest, DESIGN.md §4 flow 4).

A window that kept only a digest of its provenance asks the archive for its candidate
source tuples: the rows of the source stream with the window's key values and event time
in ``[lo, hi)``, each with its id and the archive batch that stored it (its arrival
order). The windows of one sink batch are read in one statement.

Present chunks have no indexes (their rows arrive at the stream's full rate), so the
stream's table gets one BRIN index on its event time: a summary per 32 heap pages, kept
by the server at a small cost per row, that lets a read of a few seconds skip the rest
of a chunk. Pages written since the last summary are unsummarized, and a BRIN scan
reads all of them; so before reading, the chunks' new pages are summarized
(``brin_summarize_new_values``), each page once over the stream's life. That needs the
lock autovacuum takes; if autovacuum holds it the read goes on unsummarized (correct,
only slower).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from archive.names import partition_name, quote
from archive.validate import text_problem

log = logging.getLogger(__name__)

#: heap pages per BRIN range: 32 pages of the metrics stream hold about 4,000 rows
PAGES_PER_RANGE = 32


def time_index_name(stream: str) -> str:
    """The name of a stream's BRIN index on its event time.

    >>> time_index_name("metrics")
    'metrics__ts_brin'
    """
    return f"{stream}__ts_brin"


def ensure_time_index(archiver, stream: str) -> None:
    """Create the stream's BRIN index on its event time, on every chunk (idempotent).
    Index DDL of a stream takes turns under the same advisory lock as tier changes."""
    spec = archiver.stream(stream)
    with archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"moirae_tier:{spec.name}",))
        cur.execute(f"CREATE INDEX IF NOT EXISTS {quote(time_index_name(stream))} ON {quote(stream)} "
                    f"USING brin ({quote(spec.ts_col)}) WITH (pages_per_range = {PAGES_PER_RANGE}, "
                    "autosummarize = on)")


def window_rows(archiver, stream: str, keys: Sequence[str], windows: Sequence[tuple[tuple, datetime, datetime]],
                summarize: bool = True) -> list[list[tuple[int, datetime, int]]]:
    """For each ``(key values, lo, hi)`` of ``windows``, the rows of ``stream`` with those
    key values and ``lo <= ts < hi``, as ``(_sid, ts, _batch)`` in arrival order (none for
    key values the archive cannot hold, :func:`unarchivable`).

    Key values are bound parameters, cast to the columns' archive types; a None key
    matches NULL. One statement reads every window with no NULL key (a hash join of the
    windows with the rows of their overall time span); a window with one is read alone.
    """
    if not windows:
        return []
    spec = archiver.stream(stream)
    missing = [k for k in keys if k not in spec.columns]
    if missing:
        raise KeyError(f"stream {stream!r} has no column(s) {missing} (columns: {list(spec.columns)})")
    out: list[list[tuple[int, datetime, int]]] = [[] for _ in windows]
    readable = [i for i, w in enumerate(windows) if unarchivable(w[0]) is None]
    ts = quote(spec.ts_col)
    if summarize:
        with archiver.db.connection() as conn, conn.cursor() as cur:
            _summarize(archiver, cur, stream, min(w[1] for w in windows), max(w[2] for w in windows))
    with archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
        # a fresh chunk has no statistics, and without them the planner scans the whole chunk
        # rather than the BRIN ranges of the windows (393 against 228 ms for 5 s of a 20 s
        # chunk at 640,000 rows/s); JIT compiling took another 15-25 ms of such a read
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL jit = off")
        plain = [i for i in readable if all(v is not None for v in windows[i][0])]
        if plain:
            from psycopg2.extras import execute_values

            casts = "".join(f", %s::{spec.columns[k].value}" for k in keys)
            join = " AND ".join([f"t.{ts} >= d.lo", f"t.{ts} < d.hi",
                                 *(f"t.{quote(k)} = d.k{n}" for n, k in enumerate(keys))])
            lo = min(windows[i][1] for i in plain)
            hi = max(windows[i][2] for i in plain)
            sql = (f"SELECT d.i, t._sid, t.{ts}, t._batch FROM (VALUES %s) "
                   f"AS d(i, lo, hi{''.join(f', k{n}' for n in range(len(keys)))}) "
                   f"JOIN {quote(stream)} t ON {join} "
                   f"WHERE t.{ts} >= {cur.mogrify('%s', (lo,)).decode()} AND t.{ts} < {cur.mogrify('%s', (hi,)).decode()} "
                   f"ORDER BY d.i, t._batch")
            rows = execute_values(cur, sql, [(i, windows[i][1], windows[i][2], *windows[i][0]) for i in plain],
                                  template=f"(%s, %s::timestamptz, %s::timestamptz{casts})", fetch=True,
                                  page_size=max(len(plain), 1))
            for i, sid, t, batch in rows:
                out[i].append((sid, t, batch))
        for i in sorted(set(readable) - set(plain)):
            vals, lo, hi = windows[i]
            conds = " AND ".join(f"{quote(k)} IS NULL" if v is None else f"{quote(k)} = %s" for k, v in zip(keys, vals, strict=True))
            cur.execute(f"SELECT _sid, {ts}, _batch FROM {quote(stream)} WHERE {ts} >= %s AND {ts} < %s "
                        f"AND {conds} ORDER BY _batch", (lo, hi, *[v for v in vals if v is not None]))
            out[i] = [tuple(r) for r in cur.fetchall()]
    return out


def unarchivable(key_values: Sequence) -> str | None:
    """Why no archived row can have these key values (a text value PostgreSQL cannot hold:
    such rows are dead letters, :func:`archive.validate.text_problem`), or None.

    >>> unarchivable(("s1", 3)) is None, unarchivable(("s\\x00",))[:24]
    (True, 'contains a NUL character')
    """
    for v in key_values:
        if isinstance(v, str) and (why := text_problem(v)) is not None:
            return why
    return None


def _summarize(archiver, cur, stream: str, lo: datetime, hi: datetime) -> None:
    """Summarize the new pages of the BRIN index of each chunk ``[lo, hi)`` touches."""
    grid = archiver.grid_of(stream)
    first, last = grid.chunk_of(lo), grid.chunk_of(hi)
    parts = [partition_name(stream, c) for c in range(first, last + 1)]
    cur.execute("SELECT c.oid::regclass::text FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid "
                "JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_class p ON p.oid = i.indrelid "
                "WHERE h.inhparent = to_regclass(%s) AND p.relname = ANY(%s)",
                (quote(time_index_name(stream)), parts))
    indexes = [r[0] for r in cur.fetchall()]
    if not indexes:
        return
    cur.execute("SET lock_timeout = '100ms'")  # autocommit: each statement its own transaction
    try:
        for ix in indexes:
            try:
                cur.execute("SELECT brin_summarize_new_values(%s::regclass)", (ix,))
            except Exception as exc:  # autovacuum holds the lock: read unsummarized pages
                if getattr(exc, "pgcode", None) != "55P03":
                    raise
                log.info("archive: BRIN index %s busy (autovacuum?); reading its unsummarized pages", ix)
    finally:
        cur.execute("SET lock_timeout = 0")
