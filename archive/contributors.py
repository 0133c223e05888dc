"""Reading back the source tuples of live windows (ananke.digest; docs/ARCHITECTURE.md,
demotion by provenance).

A window that kept only a digest of its provenance asks the archive for its candidate
source tuples: the rows of the source stream with the window's key values and event time
in ``[lo, hi)``, each with its id and the archive batch that stored it (its arrival
order). The windows of one sink batch are read in one statement.

Present chunks have no B-tree indexes (their rows arrive at the stream's full rate, and a
B-tree on the key doubles the cost of writing them), so the stream's table gets
one BRIN index: a summary (min and max of each column) per 32 heap pages, kept by the
server at a small cost per row. It is on the event time and the windows' key columns,
and the executors write each chunk's rows of a micro-batch partition sorted by those
keys, a block of at least 200,000 rows at a time (:func:`cluster_by`,
:mod:`archive.exec_stream`), so each 32-page range holds a few keys of about one
batch's time: a read of one key's window then skips the ranges of
every other key as well as of other times. Without that sort a range holds every key,
and a read of one key's window reads every key's rows of that time.

Pages written since the last summary are unsummarized, and a BRIN scan reads all of
them; so before reading, the chunks' new pages are summarized
(``brin_summarize_new_values``), each page once over the stream's life, by the caller
(a :class:`archive.brin_summary.Summarizer` that keeps up in the background) or here.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime

from archive import brin_pages
from archive.index_claims import unclaimed
from archive.names import partition_name, quote
from archive.types import ColumnType
from archive.validate import text_problem

log = logging.getLogger(__name__)

#: heap pages per BRIN range: 32 pages of the metrics stream hold about 4,000 rows
PAGES_PER_RANGE = 32

#: up to this many windows are read each on its own (one BRIN scan per window, in one
#: statement), when the rows are clustered by the windows' key; more are read as one
#: hash join over their whole time span, which reads every row of the span once
PER_WINDOW_READS = 32


def time_index_name(stream: str, keys: Sequence[str] = ()) -> str:
    """The name of a stream's BRIN index on its event time and ``keys``.

    >>> time_index_name("metrics"), time_index_name("metrics", ["sid"])
    ('metrics__ts_brin', 'metrics__ts_sid_brin')
    >>> len(time_index_name("m" * 40, ["a_rather_long_key_column", "another"]))
    58
    """
    name = "_".join(["ts", *keys])
    if len(stream) + len(name) + 7 > 63:  # PostgreSQL cuts identifiers at 63 bytes
        name = "ts_" + hashlib.sha1("\0".join(keys).encode()).hexdigest()[:8]
    return f"{stream}__{name}_brin"


def time_index(archiver, stream: str) -> str:
    """The name of the stream's BRIN index now: on its event time and the keys its rows
    are clustered by in this process (:func:`cluster_by`)."""
    return time_index_name(stream, archiver.cluster_keys(stream))


def cluster_by(archiver, stream: str, keys: Sequence[str]) -> tuple[str, ...]:
    """The columns a stream's rows are to be clustered by, asked for as ``keys``: the
    first keys asked for in this process win (rows have one order), less any column
    whose type BRIN cannot summarize (boolean). Unknown columns are refused by name."""
    spec = archiver.stream(stream)
    missing = [k for k in keys if k not in spec.columns]
    if missing:
        raise KeyError(f"stream {stream!r} has no column(s) {missing} (columns: {list(spec.columns)})")
    usable = tuple(k for k in keys if spec.columns[k] is not ColumnType.BOOLEAN)
    return archiver.cluster_by(stream, usable)


def ensure_time_index(archiver, stream: str, keys: Sequence[str] = ()) -> tuple[str, ...]:
    """Create the stream's BRIN index on its event time and cluster keys (idempotent),
    claim it for this process, and drop the stream's other such indexes that no live
    process claims (of other keys, or of none: each costs every write, and this one
    serves their reads too; one another process reads through stays,
    :mod:`archive.index_claims`). ``keys`` asks for the rows to be
    clustered by them (:func:`cluster_by`); returns the keys the stream's rows are
    clustered by. Index DDL of a stream takes turns under the same advisory lock as
    tier changes.

    The index is made on the stream's table ``ONLY`` (no chunk is read), then built on
    each present chunk, where live windows are read, and attached; every chunk created
    later gets it with its table (PostgreSQL gives a new partition each index of its
    parent). An index built on the whole stream at once read every chunk of its archive
    (a year's, say) under a lock that held up the stream's writes meanwhile; recent and
    old chunks have the indexes of their tier, and a window there is read through them."""
    spec = archiver.stream(stream)
    keys = cluster_by(archiver, stream, keys) if keys else archiver.cluster_keys(stream)
    name = time_index_name(stream, keys)
    cols = ", ".join(quote(c) for c in (spec.ts_col, *keys))
    how = f"USING brin ({cols}) WITH (pages_per_range = {PAGES_PER_RANGE}, autosummarize = on)"
    archiver.index_claims.claim(stream, name)  # before the DDL: another process's drop now spares it
    with archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"moirae_tier:{spec.name}",))
        cur.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON ONLY {quote(stream)} {how}")
        # the present chunks without the index attached (those created before it)
        cur.execute("SELECT chunk_id FROM moirae_chunks WHERE stream = %s AND tier = 'present' AND NOT dropped",
                    (spec.name,))
        parts = [partition_name(stream, c) for (c,) in sorted(cur.fetchall())]
        cur.execute("SELECT t.relname FROM pg_inherits h JOIN pg_index i ON i.indexrelid = h.inhrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid WHERE h.inhparent = to_regclass(%s)", (quote(name),))
        have = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT p FROM unnest(%s::text[]) p WHERE to_regclass(quote_ident(p)) IS NOT NULL",
                    ([p for p in parts if p not in have],))
        for (part,) in cur.fetchall():
            child = _child_index_name(part, name)
            cur.execute(f"CREATE INDEX IF NOT EXISTS {quote(child)} ON {quote(part)} {how}")
            cur.execute(f"ALTER INDEX {quote(name)} ATTACH PARTITION {quote(child)}")
        cur.execute("SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "WHERE i.indrelid = to_regclass(%s)", (quote(stream),))
        for (other,) in cur.fetchall():
            if other != name and other.startswith(f"{stream}__ts") and other.endswith("_brin"):
                if not unclaimed(cur, archiver.db.schema, other):
                    log.info("archive: stream %r clustered by %s here: keeping its BRIN index %s, which another "
                             "live process reads through", stream, list(keys), other)
                    continue
                log.info("archive: stream %r clustered by %s: dropping its BRIN index %s", stream, list(keys), other)
                cur.execute(f"DROP INDEX {quote(other)}")
    return keys


def _child_index_name(part: str, index: str) -> str:
    """The name of ``index``'s own index on chunk table ``part`` (under 64 bytes).

    >>> _child_index_name("metrics__c7", "metrics__ts_sid_brin")
    'metrics__c7__ts_sid_brin'
    >>> len(_child_index_name("m" * 50 + "__c123456", "m" * 50 + "__ts_brin"))
    24
    """
    name = f"{part}__{index.rsplit('__', 1)[-1]}"
    return name if len(name) <= 63 else "ix_" + hashlib.sha1(f"{part}\0{index}".encode()).hexdigest()[:16] + "_brin"


def window_rows(archiver, stream: str, keys: Sequence[str], windows: Sequence[tuple[tuple, datetime, datetime]],
                summarize: bool = True, columns: Sequence[str] = ()) -> list[list[tuple]]:
    """For each ``(key values, lo, hi)`` of ``windows``, the rows of ``stream`` with those
    key values and ``lo <= ts < hi``, as ``(_sid, ts, _batch)`` in arrival order (none for
    key values the archive cannot hold, :func:`unarchivable`), each followed by its values
    of ``columns`` when some are named (``(_sid, ts, _batch, v0, ...)``).

    Key values are bound parameters, cast to the columns' archive types; a None key
    matches NULL. One statement reads every window with no NULL key; a window with one
    is read alone. When the stream's rows are clustered by one of ``keys``
    (:func:`ensure_time_index`) and there are at most :data:`PER_WINDOW_READS` such
    windows, the statement reads each window through the BRIN index on its own (its
    key's ranges only); else it is a hash join of the windows with every row of their
    overall time span.
    """
    if not windows:
        return []
    spec = archiver.stream(stream)
    missing = [k for k in keys if k not in spec.columns]
    if missing:
        raise KeyError(f"stream {stream!r} has no column(s) {missing} (columns: {list(spec.columns)})")
    absent = [c for c in columns if c not in spec.columns]
    if absent:
        raise KeyError(f"stream {stream!r} has no column(s) {absent} (columns: {list(spec.columns)})")
    extra = "".join(f", {quote(c)}" for c in columns)
    out: list[list[tuple]] = [[] for _ in windows]
    readable = [i for i, w in enumerate(windows) if unarchivable(w[0]) is None]
    if summarize:
        brin_pages.summarize(archiver, stream,
                             brin_pages.span_chunks(archiver, stream, min(w[1] for w in windows),
                                                        max(w[2] for w in windows)),
                               time_index(archiver, stream))
    with archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
        # a fresh chunk has no statistics, and without them the planner scans the whole
        # chunk rather than the BRIN ranges of the windows; JIT compiling costs more than
        # such a read
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL jit = off")
        plain = [i for i in readable if all(v is not None for v in windows[i][0])]
        clustered = bool(set(archiver.cluster_keys(stream)) & set(keys))
        if plain and clustered and len(plain) <= PER_WINDOW_READS:
            found = _read_each(cur, spec, keys, windows, plain, extra)
        elif plain:
            found = _read_joined(cur, spec, keys, windows, plain, "".join(f", t.{quote(c)}" for c in columns))
        else:
            found = []
        for i, *row in found:
            out[i].append(tuple(row))
        for i in sorted(set(readable) - set(plain)):
            out[i] = _read_with_nulls(cur, spec, keys, *windows[i], extra)
    return out


def _read_each(cur, spec, keys: Sequence[str], windows, plain: list[int], extra: str = "") -> list[tuple]:
    """``(window, _sid, ts, _batch, extra...)`` of the ``plain`` windows, each read through
    the BRIN index on its own (its key's ranges only), in one statement."""
    ts = quote(spec.ts_col)
    cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")  # a few ranges each: no workers to start
    one = (f"(SELECT %s::int AS i, _sid, {ts}, _batch{extra} FROM {quote(spec.name)} WHERE {ts} >= %s AND {ts} < %s"
           + "".join(f" AND {quote(k)} = %s::{spec.columns[k].value}" for k in keys) + ")")
    cur.execute(" UNION ALL ".join([one] * len(plain)) + " ORDER BY i, _batch",
                [p for i in plain for p in (i, windows[i][1], windows[i][2], *windows[i][0])])
    return cur.fetchall()


def _read_joined(cur, spec, keys: Sequence[str], windows, plain: list[int], extra: str = "") -> list[tuple]:
    """``(window, _sid, ts, _batch, extra...)`` of the ``plain`` windows, as one hash join
    of the windows with every row of their overall time span (``extra`` qualified by ``t.``)."""
    from psycopg2.extras import execute_values

    ts = quote(spec.ts_col)
    casts = "".join(f", %s::{spec.columns[k].value}" for k in keys)
    join = " AND ".join([f"t.{ts} >= d.lo", f"t.{ts} < d.hi",
                         *(f"t.{quote(k)} = d.k{n}" for n, k in enumerate(keys))])
    lo = min(windows[i][1] for i in plain)
    hi = max(windows[i][2] for i in plain)
    sql = (f"SELECT d.i, t._sid, t.{ts}, t._batch{extra} FROM (VALUES %s) "
           f"AS d(i, lo, hi{''.join(f', k{n}' for n in range(len(keys)))}) "
           f"JOIN {quote(spec.name)} t ON {join} "
           f"WHERE t.{ts} >= {cur.mogrify('%s', (lo,)).decode()} AND t.{ts} < {cur.mogrify('%s', (hi,)).decode()} "
           f"ORDER BY d.i, t._batch")
    return execute_values(cur, sql, [(i, windows[i][1], windows[i][2], *windows[i][0]) for i in plain],
                          template=f"(%s, %s::timestamptz, %s::timestamptz{casts})", fetch=True,
                          page_size=max(len(plain), 1))


def _read_with_nulls(cur, spec, keys: Sequence[str], vals: tuple, lo: datetime, hi: datetime,
                     extra: str = "") -> list[tuple]:
    """``(_sid, ts, _batch, extra...)`` of one window whose key values hold a None (matching NULL)."""
    ts = quote(spec.ts_col)
    conds = " AND ".join(f"{quote(k)} IS NULL" if v is None else f"{quote(k)} = %s"
                         for k, v in zip(keys, vals, strict=True))
    cur.execute(f"SELECT _sid, {ts}, _batch{extra} FROM {quote(spec.name)} WHERE {ts} >= %s AND {ts} < %s "
                f"AND {conds} ORDER BY _batch", (lo, hi, *[v for v in vals if v is not None]))
    return [tuple(r) for r in cur.fetchall()]


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
