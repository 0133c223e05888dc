"""Chunk layout: each stream's own chunk interval, and creating chunks with a bounded
number of locks per transaction (M 4.1; see docs/ARCHITECTURE.md for where the grid
differs from the paper's single global one).

- **Per-stream intervals.** A stream's chunk ``c`` is ``[c * I, (c + 1) * I)`` from the
  epoch, ``I`` the stream's interval. ``I`` is configured per stream, or chosen from the
  rate of the stream's first batch so a chunk holds about ``chunk_target_rows`` rows
  (TimescaleDB's chunk-interval guidance: size chunks by rows/memory, not by a global
  clock), rounded *down* to a step of :data:`LADDER`; or ``chunk_span``. Once chosen it
  is recorded in ``moirae_streams.chunk_us`` and never changes (partitions may not
  overlap).
- **A history-query's task grid.** Recall runs a history-query once per *task interval*.
  For a query over streams with intervals ``I_1..I_n`` the task grid is the coarsest,
  ``max(I_k)`` (:func:`task_grid`); the Archiver applies each table's time predicate for
  the task's interval, so every row is read by exactly one task whatever the intervals.
  The steps of :data:`LADDER` nest (each divides the next), so with chosen intervals a
  finer stream's chunk lies wholly inside one task: no chunk is read by two tasks.
  (Configured intervals off the ladder are still correct, a chunk may then be read in
  two parts.) A single-stream query's tasks are exactly that stream's chunks.
- **Bounded locks.** A new partition is locked until its transaction commits; chunks
  are created at most :data:`CHUNKS_PER_TRANSACTION` per transaction
  (:func:`ensure_chunks`, :func:`ensure_span`), each transaction its own.
- **One creator, two callers.** :func:`create_chunks` is the SQL of chunk creation and
  needs only a cursor: the driver calls it through :func:`create_in`, and an executor
  archiving its partition of a micro-batch (:mod:`archive.exec_sink`) calls it itself.

Every function here takes the archive's :class:`~archive.catalog.Catalog`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from psycopg2.extras import execute_values

from archive.abc import EPOCH, ChunkGrid, DescendingIds, Tier
from archive.errors import BatchTooWide, SchemaConflict
from archive.names import partition_name
from archive.schema import partition_ddl

if TYPE_CHECKING:
    from archive.catalog import Catalog
    from archive.streams import StreamSpec

CHUNKS_PER_TRANSACTION = 32
"""New chunks created per transaction (each holds a lock on its partition until commit)."""

MAX_CHUNKS_PER_BATCH = 512
"""Chunks one appended batch (or one executor's partition of it) may touch: its COPY locks
each touched partition until commit, and PostgreSQL's shared lock table holds
max_locks_per_transaction (64) x max_connections."""


def check_width(n_chunks: int, what: str, span: object) -> None:
    """Refuse a write touching more than :data:`MAX_CHUNKS_PER_BATCH` chunks, naming
    ``what`` (the batch, the stream, the partition) and the chunk interval ``span``."""
    if n_chunks > MAX_CHUNKS_PER_BATCH:
        raise BatchTooWide(f"{what} spans {n_chunks} chunks of {span}; one transaction may write at most "
                           f"{MAX_CHUNKS_PER_BATCH} (PostgreSQL's lock table): send smaller batches or set a "
                           "larger chunk interval (archive.chunk_span)")

LADDER: tuple[timedelta, ...] = (
    timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15), timedelta(minutes=30),
    timedelta(hours=1), timedelta(hours=2), timedelta(hours=6), timedelta(hours=12), timedelta(days=1),
    timedelta(days=7), timedelta(days=28))
"""Calendar-friendly chunk intervals a rate-based choice rounds down to; each divides the
next, so chunks of different streams nest, and all tile time from the epoch. The first
step is the floor, the last the ceiling. From 5 minutes to a day no two neighbours are
more than 3x apart, so there rounding down leaves a chunk at least a third of its target."""


def choose_interval(rows: int, span: timedelta, target_rows: int, fallback: timedelta) -> timedelta:
    """The interval whose chunks hold about ``target_rows`` at the observed rate
    (``rows`` over ``span``), rounded down to :data:`LADDER` (at least its first step);
    ``fallback`` when the rate cannot be estimated (fewer than 2 rows, or no span).

    >>> choose_interval(3600, timedelta(hours=1), 100_000, timedelta(hours=1))  # 1 row/s
    datetime.timedelta(days=1)
    >>> choose_interval(36_000, timedelta(hours=1), 1_000_000, timedelta(hours=1))  # 10 rows/s
    datetime.timedelta(days=1)
    >>> choose_interval(36_000, timedelta(hours=1), 500_000, timedelta(hours=1))  # the default target
    datetime.timedelta(seconds=43200)
    >>> choose_interval(1_000_000, timedelta(seconds=1), 1_000, timedelta(hours=1))
    datetime.timedelta(seconds=60)
    >>> choose_interval(1, timedelta(0), 1_000, timedelta(hours=1))
    datetime.timedelta(seconds=3600)
    """
    if rows < 2 or span <= timedelta(0):
        return fallback
    ideal = span * (target_rows / rows)
    fitting = [step for step in LADDER if step <= ideal]
    return fitting[-1] if fitting else LADDER[0]


def task_grid(catalog: Catalog, streams: Iterable[str]) -> ChunkGrid:
    """The grid a history-query over ``streams`` runs on: the coarsest of their intervals."""
    spans = [catalog.grid_of(s).span for s in streams]
    return ChunkGrid(max(spans)) if spans else catalog.grid


def bump_version(cur, stream: str) -> None:
    """Mark the stream's set of chunks as changed (inside the changing transaction)."""
    cur.execute("UPDATE moirae_streams SET chunks_version = chunks_version + 1 WHERE stream = %s", (stream,))


class TaskIdCache:
    """Task ids per set of streams, reused while none of the streams' chunk sets changed
    (``moirae_streams.chunks_version``, bumped in the transaction that creates, revives or
    drops a chunk, by any process): planning a recall over 20,000 chunks then costs one
    primary-key read, not a scan of the catalog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, ...], tuple[tuple, DescendingIds]] = {}

    def get(self, catalog: Catalog, streams: Iterable[str]) -> DescendingIds:
        names = tuple(sorted(set(streams)))
        with catalog.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, chunks_version, chunk_us FROM moirae_streams WHERE stream = ANY(%s) "
                        "ORDER BY stream", (list(names),))
            version = tuple(cur.fetchall())
        with self._lock:
            hit = self._ids.get(names)
        if hit is not None and hit[0] == version:
            return hit[1]
        ids = DescendingIds(task_ids(catalog, names))
        with self._lock:
            self._ids[names] = (version, ids)
        return ids


def task_ids(catalog: Catalog, streams: Iterable[str]) -> list[int]:
    """Ids (on :func:`task_grid`) of the task intervals overlapping any non-dropped chunk
    of ``streams``, newest first. One SQL statement over the catalog."""
    names = list(streams)
    span_us = task_grid(catalog, names).span_us
    with catalog.transaction() as conn, conn.cursor() as cur:
        # a chunk [start, end) overlaps tasks floor(start / T) .. floor((end - 1us) / T)
        cur.execute(
            "SELECT DISTINCT t FROM moirae_chunks c, LATERAL generate_series("
            " div((extract(epoch FROM c.start_ts - %(epoch)s) * 1e6)::numeric, %(t)s)::bigint,"
            " div((extract(epoch FROM c.end_ts - %(epoch)s) * 1e6 - 1)::numeric, %(t)s)::bigint) AS t "
            "WHERE c.stream = ANY(%(s)s) AND NOT c.dropped ORDER BY t DESC",
            {"epoch": EPOCH, "t": span_us, "s": names})
        return [int(r[0]) for r in cur.fetchall()]


def ensure_chunks(catalog: Catalog, spec: StreamSpec, chunk_ids: Iterable[int], bulk: bool = False) -> dict[int, Tier]:
    """Create the missing chunks (partitions and catalog rows) of ``spec`` among
    ``chunk_ids`` (on the stream's own grid), at most :data:`CHUNKS_PER_TRANSACTION` per
    transaction; return every one's tier. Idempotent and safe against concurrent
    creators (the partition DDL is ``IF NOT EXISTS`` under a per-stream advisory lock)."""
    out: dict[int, Tier] = {}
    for group in in_groups(chunk_ids):
        with catalog.transaction() as conn, conn.cursor() as cur:
            out.update(create_in(catalog, cur, spec, group, bulk))
    return out


def in_groups(chunk_ids: Iterable[int]) -> list[list[int]]:
    """``chunk_ids`` deduplicated and sorted, in groups of at most
    :data:`CHUNKS_PER_TRANSACTION`: one creating transaction each.

    >>> [len(g) for g in in_groups(range(70))]
    [32, 32, 6]
    """
    ids = sorted({int(c) for c in chunk_ids})
    return [ids[i:i + CHUNKS_PER_TRANSACTION] for i in range(0, len(ids), CHUNKS_PER_TRANSACTION)]


def ensure_span(catalog: Catalog, stream: str, min_ts: datetime, max_ts: datetime, bulk: bool = False,
                rows: int | None = None) -> dict[int, Tier]:
    """Ensure the chunks covering ``[min_ts, max_ts]`` of ``stream`` exist (bounded locks
    per transaction), e.g. before executors write their partitions of a batch. With no
    interval fixed yet for the stream, ``rows`` (how many rows the span holds) lets the
    rate-based choice see the rate. Returns ``{chunk_id: tier}``."""
    if min_ts.tzinfo is None or max_ts.tzinfo is None:
        raise ValueError(f"ensure_span({stream!r}): times must be timezone-aware, got {min_ts!r}, {max_ts!r}")
    if max_ts < min_ts:
        raise ValueError(f"ensure_span({stream!r}): max_ts {max_ts} is before min_ts {min_ts}")
    spec = catalog.stream(stream)
    grid = fix_interval(catalog, stream, rows if rows is not None else 0, max_ts - min_ts)
    return ensure_chunks(catalog, spec, range(grid.chunk_of(min_ts), grid.chunk_of(max_ts) + 1), bulk)


def create_in(catalog: Catalog, cur, spec: StreamSpec, chunk_ids: list[int], bulk: bool) -> dict[int, Tier]:
    """Inside the caller's transaction: :func:`create_chunks` on the stream's grid, with
    the catalog's current horizon for the stream."""
    return create_chunks(cur, spec, catalog.grid_of(spec.name).span_us, chunk_ids, catalog.horizon(spec.name), bulk)


def create_chunks(cur, spec: StreamSpec, span_us: int, chunk_ids: list[int], horizon: datetime | None,
                  bulk: bool) -> dict[int, Tier]:
    """Inside the caller's transaction: create the missing partitions and catalog rows
    among ``chunk_ids`` (chunk ``c`` is ``[c * span_us, (c + 1) * span_us)`` from the
    epoch, as :meth:`ChunkGrid.bounds`; keep it to a few: each holds a lock until
    commit); return every one's tier. A new chunk is old when ``bulk`` or when it ends
    at or before ``horizon``, else present.

    Safe against concurrent creators of the same chunk (another executor of the same
    batch, the driver): the DDL runs under a per-stream advisory lock and only for
    tables that do not exist, and the catalog insert keeps a row another creator
    committed. A partition is attached to the stream's table (:func:`archive.schema.partition_ddl`),
    which does not wait for the transactions writing to its other chunks; commit soon
    all the same, since until then the lock on the stream's table keeps out the next
    creator and the stream's index DDL (:mod:`archive.contributors`)."""
    if not chunk_ids:
        return {}
    grid = ChunkGrid(timedelta(microseconds=span_us))
    cur.execute("SELECT chunk_id, tier, dropped FROM moirae_chunks WHERE stream = %s AND chunk_id = ANY(%s)",
                (spec.name, chunk_ids))
    found = {cid: (Tier(t), dropped) for cid, t, dropped in cur.fetchall()}
    out = {cid: found[cid][0] for cid in chunk_ids if cid in found and not found[cid][1]}
    new = [cid for cid in chunk_ids if cid not in out]
    if not new:
        return out
    values = []
    parts = {cid: partition_name(spec.name, cid) for cid in new}
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s)); "  # then the tables missing, in one round trip
                "SELECT p FROM unnest(%s::text[]) p WHERE to_regclass(quote_ident(p)) IS NULL",
                (spec.name, list(parts.values())))
    absent = {r[0] for r in cur.fetchall()}
    ddl = []
    for cid in new:
        start, end = grid.bounds(cid)
        tier = Tier.OLD if bulk or (horizon is not None and end <= horizon) else Tier.PRESENT
        values.append((spec.name, cid, start, end, tier.value))
        if parts[cid] in absent:
            ddl += partition_ddl(cur, spec.name, parts[cid], start, end, vacuum_off(spec, tier))
    if ddl:
        cur.execute("\n".join(ddl))  # one round trip for the few partitions of this transaction
    # Reset the counts only when reviving a dropped chunk: a concurrent writer may have
    # created this chunk (and counted its rows) since the SELECT above.
    execute_values(cur, "INSERT INTO moirae_chunks (stream, chunk_id, start_ts, end_ts, tier) VALUES %s "
                   "ON CONFLICT (stream, chunk_id) DO UPDATE SET dropped = false, tier = EXCLUDED.tier, "
                   "rows = 0, late_rows = 0 WHERE moirae_chunks.dropped", values,
                   template="(%s, %s::bigint, %s, %s, %s)", page_size=len(values))
    changed = cur.rowcount  # catalog rows inserted or revived here: < len(new) if another creator was first
    cur.execute("SELECT chunk_id, tier FROM moirae_chunks WHERE stream = %s AND chunk_id = ANY(%s)",
                (spec.name, new))
    out.update({int(cid): Tier(t) for cid, t in cur.fetchall()})
    if changed:  # the partitions of one batch that all found a chunk missing bump it once
        bump_version(cur, spec.name)
    return out


def vacuum_off(spec: StreamSpec, tier: Tier) -> bool:
    """Whether autovacuum leaves a chunk alone: a present chunk of a raw stream.

    Such a chunk only grows (rows are never updated or deleted there) at the stream's
    rate, and autovacuum's insert-triggered VACUUM ANALYZE would scan it again and again,
    its CPU taken from the archive and holding the lock the window reads' BRIN summaries
    need (:mod:`archive.brin_summary`), so those reads would read every key's pages
    meanwhile. Leaving the present tier turns it back on
    (:func:`archive.tiers._set_tier`); PostgreSQL's anti-wraparound VACUUM runs whatever
    the setting. Event and context streams replace rows in present chunks (supersede),
    so they keep it."""
    return tier is Tier.PRESENT and spec.kind == "raw"


def rate_based(catalog: Catalog, stream: str) -> bool:
    """Whether ``stream``'s interval, while not fixed, waits for its first rows' rate:
    a raw stream with ``chunk_target_rows`` set and no configured interval. Otherwise
    :func:`fix_interval` needs no rows, and a writer need not count them first."""
    s = catalog.settings
    return (catalog.interval(stream) is None and s.chunk_intervals.get(stream) is None
            and bool(s.chunk_target_rows) and catalog.stream(stream).kind == "raw")


def fix_interval(catalog: Catalog, stream: str, rows: int, span: timedelta) -> ChunkGrid:
    """The stream's grid, choosing and recording its interval first if none is fixed:
    configured (``chunk_intervals``), else from ``rows`` over ``span`` (raw streams, with
    ``chunk_target_rows`` set), else ``chunk_span``."""
    catalog.stream(stream)  # an unknown stream is refused before anything is recorded
    fixed = catalog.interval(stream)
    if fixed is None:
        settings = catalog.settings
        chosen = settings.chunk_intervals.get(stream)
        if rate_based(catalog, stream):
            chosen = choose_interval(rows, span, settings.chunk_target_rows, settings.chunk_span)
        with catalog.transaction() as conn, conn.cursor() as cur:
            fixed = record_interval(cur, stream, chosen or settings.chunk_span)
        catalog.remember_interval(stream, fixed)
    return ChunkGrid(fixed)


def set_interval(catalog: Catalog, stream: str, span: timedelta) -> None:
    """Fix the stream's interval to ``span`` now; a different recorded one is a conflict."""
    if span < timedelta(seconds=1) or span % timedelta(seconds=1):
        raise ValueError(f"stream {stream!r}: chunk interval must be a whole number of seconds >= 1 s, got {span!r}")
    with catalog.transaction() as conn, conn.cursor() as cur:
        fixed = record_interval(cur, stream, span)
    catalog.remember_interval(stream, fixed)
    if fixed != span:
        raise SchemaConflict(f"stream {stream!r} is archived in chunks of {fixed}; "
                             f"cannot re-register it with chunks of {span}")


def record_interval(cur, stream: str, span: timedelta) -> timedelta:
    """Record ``span`` as the stream's interval unless one is recorded; return the recorded one."""
    us = span // timedelta(microseconds=1)
    cur.execute("UPDATE moirae_streams SET chunk_us = %s WHERE stream = %s AND chunk_us IS NULL", (us, stream))
    cur.execute("SELECT chunk_us FROM moirae_streams WHERE stream = %s", (stream,))
    return timedelta(microseconds=cur.fetchone()[0])
