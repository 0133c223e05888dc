"""Chunk layout: each stream's own chunk interval, and creating chunks with a bounded
number of locks per transaction (M 4.1; see docs/ARCHITECTURE.md for where the grid
differs from the paper's single global one).

- **Per-stream intervals that follow the data.** A stream's chunk ``c`` is
  ``[c * I, (c + 1) * I)`` from the epoch, ``I`` the stream's interval, always a step of
  :data:`LADDER` unless configured. ``I`` is configured per stream, ``chunk_span`` for a
  derived stream (:func:`rate_chosen`), or chosen from a raw stream's observed density so that a chunk holds about ``chunk_target_rows`` rows
  (TimescaleDB's chunk-interval guidance: size chunks by rows, not by a global clock),
  rounded *down* to a step of :data:`LADDER` (:func:`settle`). A batch whose rate cannot
  be estimated (one row, or all its rows at one instant: a replay's first micro-batch)
  gets ``chunk_span`` as a *guess*; the next batches estimate the rate from every row
  seen so far (:class:`Evidence`: rows per time, corrected for few distinct instants).
  While the stream is *young* (at most :data:`YOUNG_CHUNKS` chunks and
  :data:`YOUNG_ROWS` rows, every chunk present, none indexed, materialized or dropped)
  a guess, or an estimate far from the new one, is *revised*: the stream's rows move
  onto the new step's chunks in one transaction (:func:`revise`), so every stream has
  one interval at any time and chunks never overlap. An estimate becomes final once the
  rows seen cover one whole chunk of it, or the stream is no longer young; the
  interval is then fixed for good (``moirae_streams.chunk_us``, with
  ``chunk_provisional`` NULL).
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
  (:func:`ensure_chunks`, :func:`ensure_span`), each transaction its own. A batch's
  rows are written at most :data:`MAX_CHUNKS_PER_BATCH` chunks per transaction
  (:func:`pieces`), each piece exactly once (:mod:`archive.writes`, :mod:`archive.exec_sink`).
- **One creator, two callers.** :func:`create_chunks` is the SQL of chunk creation and
  needs only a cursor: the driver calls it through :func:`create_in`, and an executor
  archiving its partition of a micro-batch (:mod:`archive.exec_sink`) calls it itself.

Every function here takes the archive's :class:`~archive.catalog.Catalog`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
from psycopg2.extras import execute_values

from archive.abc import EPOCH, ChunkGrid, DescendingIds, Tier
from archive.errors import SchemaConflict
from archive.names import partition_name, quote
from archive.schema import partition_ddl

if TYPE_CHECKING:
    from archive.catalog import Catalog
    from archive.present import PresentCache
    from archive.streams import StreamSpec

CHUNKS_PER_TRANSACTION = 32
"""New chunks created per transaction (each holds a lock on its partition until commit)."""

MAX_CHUNKS_PER_BATCH = 512
"""Chunks one write transaction (a *piece* of a batch, or of an executor's partition of
it) may touch: its COPY locks each touched partition until commit, and PostgreSQL's
shared lock table holds max_locks_per_transaction (64) x max_connections. A batch
touching more is written in several pieces (:func:`pieces`)."""


def pieces(chunk_ids: list[int]) -> list[list[int]]:
    """``chunk_ids`` (ascending, distinct) in consecutive groups of at most
    :data:`MAX_CHUNKS_PER_BATCH`: one write transaction each, the same groups every time
    the same rows are written (so a replay finds the pieces already committed). No
    chunk at all is one empty piece (a batch of dead letters only still commits).

    >>> [len(p) for p in pieces(list(range(1100)))], pieces([])
    ([512, 512, 76], [[]])
    """
    if not chunk_ids:
        return [[]]
    return [chunk_ids[i:i + MAX_CHUNKS_PER_BATCH] for i in range(0, len(chunk_ids), MAX_CHUNKS_PER_BATCH)]


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
    ideal = Evidence(rows, rows, 0, span // timedelta(microseconds=1)).ideal(target_rows)
    return fallback if ideal is None else ladder_step(ideal)


def ladder_step(ideal: timedelta) -> timedelta:
    """``ideal`` rounded down to a step of :data:`LADDER` (at least its first).

    >>> ladder_step(timedelta(hours=5)), ladder_step(timedelta(days=400)), ladder_step(timedelta(0))
    (datetime.timedelta(seconds=7200), datetime.timedelta(days=28), datetime.timedelta(seconds=60))
    """
    fitting = [step for step in LADDER if step <= ideal]
    return fitting[-1] if fitting else LADDER[0]


@dataclass(frozen=True)
class Evidence:
    """What a stream's density is estimated from: ``rows`` at ``instants`` distinct event
    times between ``lo_us`` and ``hi_us`` (microseconds from the epoch)."""

    rows: int = 0
    instants: int = 0
    lo_us: int | None = None
    hi_us: int | None = None

    @classmethod
    def of(cls, us: np.ndarray) -> Evidence:
        """The evidence of a batch's event times (microseconds).

        >>> Evidence.of(np.array([5, 5, 9]))
        Evidence(rows=3, instants=2, lo_us=5, hi_us=9)
        """
        if not len(us):
            return cls()
        return cls(len(us), len(np.unique(us)), int(us.min()), int(us.max()))

    def __add__(self, other: Evidence) -> Evidence:
        """Both together (instants may be counted twice where they overlap: an estimate)."""
        lows = [x for x in (self.lo_us, other.lo_us) if x is not None]
        highs = [x for x in (self.hi_us, other.hi_us) if x is not None]
        return Evidence(self.rows + other.rows, self.instants + other.instants,
                        min(lows) if lows else None, max(highs) if highs else None)

    @property
    def span(self) -> timedelta:
        """The time the evidence covers."""
        if self.lo_us is None or self.hi_us is None:
            return timedelta(0)
        return timedelta(microseconds=self.hi_us - self.lo_us)

    def ideal(self, target_rows: int) -> timedelta | None:
        """The interval holding ``target_rows`` at the observed rate, or None when the rate
        cannot be estimated (fewer than 2 rows or 2 instants). ``n`` rows at ``d``
        instants over ``span`` are ``n (d - 1) / d`` rows per ``span``: with one key
        per hour, 2 instants an hour apart are 1 row an hour, not 2.

        >>> Evidence(6, 2, 0, 3_600_000_000).ideal(3)
        datetime.timedelta(seconds=3600)
        >>> Evidence(3, 1, 0, 0).ideal(3) is None
        True
        """
        if self.rows < 2 or self.instants < 2 or self.span <= timedelta(0):
            return None
        effective = self.rows * (self.instants - 1) / self.instants
        return self.span * (target_rows / effective)


YOUNG_CHUNKS = 256
"""A stream with more chunks than this has a final interval (a revision moves every row
of every chunk in one transaction, each chunk's table locked)."""

YOUNG_ROWS = 200_000
"""A stream with more rows than this has a final interval (the rows a revision moves)."""

REVISE_LOCK_TIMEOUT_MS = 2000
"""How long a revision waits for the stream's table (a history-query may hold it); it is
tried again at the next batch."""


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
    """Whether ``stream``'s interval waits for rows to estimate it: a stream with
    ``chunk_target_rows`` set, no configured interval, and no interval recorded or only
    a guess (:func:`settle`). A writer then counts the next batch's rows, instants and
    time span first; otherwise :func:`settle` needs no rows."""
    return rate_chosen(catalog, stream) and (catalog.interval(stream) is None
                                             or catalog.provisional(stream) == "guess")


def rate_chosen(catalog: Catalog, stream: str) -> bool:
    """Whether ``stream``'s interval is chosen from its rate at all: a raw stream with
    ``chunk_target_rows`` set and no interval configured for it. A derived stream (events,
    contexts) keeps ``chunk_span``: its rows are few, and materialization works in units
    of the coarsest interval among a query's inputs and outputs
    (:meth:`moirae.materialize.replica.Materializer.unit_grid`), which a sparse event
    stream's coarse interval would make weeks long."""
    s = catalog.settings
    spec = catalog.stream(stream)  # an unknown stream is refused before anything is recorded
    return s.chunk_intervals.get(stream) is None and bool(s.chunk_target_rows) and spec.kind == "raw"


def fix_interval(catalog: Catalog, stream: str, rows: int, span: timedelta) -> ChunkGrid:
    """The stream's grid after :func:`settle` with ``rows`` spread over ``span`` (as many
    instants as rows); ``rows`` 0: no new evidence."""
    ev = Evidence(rows, rows, 0, span // timedelta(microseconds=1)) if rows else None
    return settle(catalog, stream, ev)


def settle(catalog: Catalog, stream: str, batch: Evidence | None = None,
           present: PresentCache | None = None) -> ChunkGrid:
    """The grid the stream's next rows are written on, choosing, revising or fixing its
    interval first (module doc) from ``batch`` (the next batch's evidence, if known)
    and, while the interval is provisional, every row archived so far.

    Not rate-chosen: the configured interval, else ``chunk_span``, fixed at once. No
    interval yet and no estimate: ``chunk_span`` as a guess. Otherwise the estimate's
    :data:`LADDER` step; a guess is revised to it, an estimate only when the new one is
    far (:func:`_far`). ``present``: the memory mirror to forget the moved chunks in.

    Without ``batch``, an estimate is checked against the archived rows again only once
    they have grown by :data:`RECHECK_GROWTH` since its last check: the check counts the
    stream's distinct instants, a scan of every row, and a writer asks before each batch;
    an estimate moves little until the rows behind it have grown that much."""
    fixed = catalog.interval(stream)
    state = catalog.provisional(stream)
    if fixed is not None and state is None:
        return ChunkGrid(fixed)
    settings = catalog.settings
    if not rate_chosen(catalog, stream):
        span = settings.chunk_intervals.get(stream) or settings.chunk_span
        _record(catalog, stream, fixed or span, None, fixed)
        return catalog.grid_of(stream)
    ev = batch or Evidence()
    if fixed is not None:
        recheck = batch is None and state == "estimate"
        seen = _archived(catalog, stream, catalog.estimated_at.get(stream, 0) * RECHECK_GROWTH if recheck else 0)
        if seen is None:  # no longer young: the interval stays as it is, for good
            _record(catalog, stream, fixed, None, fixed)
            return ChunkGrid(fixed)
        if seen is _UNCHANGED:
            return ChunkGrid(fixed)
        catalog.estimated_at[stream] = seen.rows
        ev = seen + ev
    ideal = ev.ideal(settings.chunk_target_rows)
    if ideal is None:
        if fixed is None:
            _record(catalog, stream, settings.chunk_span, "guess", None)
        return catalog.grid_of(stream)
    chosen = ladder_step(ideal)
    settled = ev.span >= chosen  # the rows seen cover a whole chunk of the estimate
    if fixed is None:
        _record(catalog, stream, chosen, None if settled else "estimate", None)
        return catalog.grid_of(stream)
    if chosen != fixed and (state == "guess" or _far(ideal, fixed)):
        outcome = revise(catalog, catalog.stream(stream), fixed, chosen, present)
        if outcome == "busy":  # tried again with the next batch
            catalog.estimated_at.pop(stream, None)
            return catalog.grid_of(stream)
        if outcome == "refused":
            settled = True
        else:
            fixed = chosen
    _record(catalog, stream, fixed, None if settled else "estimate", catalog.interval(stream))
    return catalog.grid_of(stream)


def _far(ideal: timedelta, current: timedelta) -> bool:
    """Whether an estimate's ideal interval is far enough from the current interval to
    move the stream's rows: under half of it, or over four times it (a chunk would hold
    under half, or over four times, its target), so neighbouring estimates never flap.

    >>> _far(timedelta(hours=3), timedelta(hours=1)), _far(timedelta(hours=5), timedelta(hours=1))
    (False, True)
    """
    return ideal < current / 2 or ideal > current * 4


_UNCHANGED = Evidence()
"""What :func:`_archived` returns for a young stream with fewer rows than asked for."""

RECHECK_GROWTH = 2
"""How much a young stream's archived rows grow before a provisional estimate is checked
against them again (:func:`settle`; :func:`_far` revises only past 2x either way)."""


def _archived(catalog: Catalog, stream: str, min_rows: int = 0) -> Evidence | None:
    """The evidence of every row of a young stream (module doc), or None when the
    stream is no longer young (or any chunk is not present, or derived data exists);
    :data:`_UNCHANGED` (not read) while it holds fewer than ``min_rows`` rows."""
    with catalog.transaction() as conn, conn.cursor() as cur:
        rows = _young_rows(cur, stream)
        if rows is None:
            return None
        if rows < min_rows:
            return _UNCHANGED
        ts = quote(catalog.stream(stream).ts_col)
        cur.execute(f"SELECT count(*), count(DISTINCT {ts}), (extract(epoch FROM min({ts})) * 1e6)::bigint, "
                    f"(extract(epoch FROM max({ts})) * 1e6)::bigint FROM {quote(stream)}")
        rows, instants, lo, hi = cur.fetchone()
    return Evidence(int(rows), int(instants), lo, hi)


def _young(cur, stream: str) -> bool:
    """Inside the caller's transaction: whether the stream's interval may still be revised."""
    return _young_rows(cur, stream) is not None


def _young_rows(cur, stream: str) -> int | None:
    """Inside the caller's transaction: the young stream's archived rows (the catalog's
    count), or None when its interval may no longer be revised."""
    cur.execute("SELECT count(*), coalesce(sum(rows), 0), count(*) FILTER (WHERE dropped OR tier <> 'present' "
                "OR cardinality(indexes) > 0 OR cardinality(materialized) > 0) FROM moirae_chunks WHERE stream = %s",
                (stream,))
    n, rows, blocked = cur.fetchone()
    return int(rows) if n <= YOUNG_CHUNKS and rows <= YOUNG_ROWS and not blocked else None


def revise(catalog: Catalog, spec: StreamSpec, current: timedelta, new: timedelta,
           present: PresentCache | None = None) -> str:
    """Move every row of the young stream ``spec`` from its chunks of ``current`` onto
    chunks of ``new``, in one transaction: the stream's table locked (at most
    :data:`REVISE_LOCK_TIMEOUT_MS`), its rows copied aside, its chunk tables dropped and
    its catalog rows deleted, the interval recorded, the new chunks created
    (:func:`create_chunks`) and the rows put back, counted per new chunk. Readers then
    see the stream whole on one grid, before and after.

    Returns ``"done"``; ``"busy"`` (the lock not granted, a batch part in flight in
    ``moirae_batch_parts``, or the interval changed meanwhile: try again later); or
    ``"refused"`` (the stream is no longer young, or the move would lock too many
    chunks: keep ``current``)."""
    from psycopg2 import errors

    stream = spec.name
    new_us = new // timedelta(microseconds=1)
    with catalog.transaction() as conn, conn.cursor() as cur:
        try:
            outcome, old, new_ids = _move(cur, catalog, spec, current, new_us)
        except errors.LockNotAvailable:
            outcome = "busy"
        if outcome != "done":
            conn.rollback()
            return outcome
    catalog.remember_interval(stream, new, catalog.provisional(stream))
    if present is not None:
        for cid in {*old, *new_ids}:
            present.invalidate(stream, cid)
    return "done"


def _move(cur, catalog: Catalog, spec: StreamSpec, current: timedelta, new_us: int
          ) -> tuple[str, list[int], list[int]]:
    """The body of :func:`revise` inside its transaction: its outcome, the old chunk ids
    and the new ones. A batch part in flight is one that wrote rows into chunks (a shared
    read's staged parts wrote none: their batch is being appended now)."""
    stream = spec.name
    ts = quote(spec.ts_col)
    cols = ", ".join(quote(c) for c, _ in spec.stored_columns)
    cur.execute(f"SET LOCAL lock_timeout = {int(REVISE_LOCK_TIMEOUT_MS)}")
    cur.execute(f"LOCK TABLE {quote(stream)} IN ACCESS EXCLUSIVE MODE")
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (stream,))  # as chunk creators take
    cur.execute("SELECT chunk_us FROM moirae_streams WHERE stream = %s FOR UPDATE", (stream,))
    row = cur.fetchone()
    cur.execute("SELECT EXISTS (SELECT 1 FROM moirae_batch_parts WHERE stream = %s AND chunks <> '{}'::jsonb)",
                (stream,))
    if row is None or row[0] != current // timedelta(microseconds=1) or cur.fetchone()[0]:
        return "busy", [], []
    if not _young(cur, stream):
        return "refused", [], []
    cur.execute("SELECT chunk_id FROM moirae_chunks WHERE stream = %s", (stream,))
    old = [int(r[0]) for r in cur.fetchall()]
    new_of = f"floor(extract(epoch FROM {ts}) * 1000000 / {int(new_us)})::bigint"
    cur.execute(f"SELECT DISTINCT {new_of} FROM {quote(stream)}")
    new_ids = sorted(int(r[0]) for r in cur.fetchall())
    if len(old) + len(new_ids) > MAX_CHUNKS_PER_BATCH:
        return "refused", [], []
    cur.execute(f"CREATE TEMP TABLE moirae_revise ON COMMIT DROP AS SELECT {cols} FROM {quote(stream)}")
    if old:
        cur.execute("DROP TABLE IF EXISTS " + ", ".join(quote(partition_name(stream, c)) for c in old))
    cur.execute("DELETE FROM moirae_chunks WHERE stream = %s", (stream,))
    cur.execute("UPDATE moirae_streams SET chunk_us = %s WHERE stream = %s", (new_us, stream))
    create_chunks(cur, spec, new_us, new_ids, catalog.horizon(stream), False)
    cur.execute(f"INSERT INTO {quote(stream)} ({cols}) SELECT {cols} FROM moirae_revise")
    cur.execute(f"UPDATE moirae_chunks c SET rows = v.n FROM (SELECT {new_of} AS cid, count(*) AS n "
                "FROM moirae_revise GROUP BY 1) v WHERE c.stream = %s AND c.chunk_id = v.cid", (stream,))
    bump_version(cur, stream)
    return "done", old, new_ids


def set_interval(catalog: Catalog, stream: str, span: timedelta) -> None:
    """Fix the stream's interval to ``span`` now; a different recorded one is a conflict
    (a provisional one with no chunk yet is replaced)."""
    if span < timedelta(seconds=1) or span % timedelta(seconds=1):
        raise ValueError(f"stream {stream!r}: chunk interval must be a whole number of seconds >= 1 s, got {span!r}")
    fixed = catalog.interval(stream)
    if fixed is not None and fixed != span:
        empty = False
        if catalog.provisional(stream) is not None:
            with catalog.transaction() as conn, conn.cursor() as cur:
                cur.execute("SELECT NOT EXISTS (SELECT 1 FROM moirae_chunks WHERE stream = %s)", (stream,))
                empty = cur.fetchone()[0]
        if not empty:
            raise SchemaConflict(f"stream {stream!r} is archived in chunks of {fixed}; "
                                 f"cannot re-register it with chunks of {span}")
    recorded = _record(catalog, stream, span, None, fixed)
    if recorded != span:
        raise SchemaConflict(f"stream {stream!r} is archived in chunks of {recorded}; "
                             f"cannot re-register it with chunks of {span}")


def _record(catalog: Catalog, stream: str, span: timedelta, provisional: str | None,
            expected: timedelta | None) -> timedelta:
    """Record ``span`` (and whether it is provisional) as the stream's interval if the
    recorded one is still ``expected`` (None: none recorded); return the one recorded."""
    us = span // timedelta(microseconds=1)
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("UPDATE moirae_streams SET chunk_us = %s, chunk_provisional = %s WHERE stream = %s "
                    "AND chunk_us IS NOT DISTINCT FROM %s",
                    (us, provisional, stream, None if expected is None else expected // timedelta(microseconds=1)))
        cur.execute("SELECT chunk_us, chunk_provisional FROM moirae_streams WHERE stream = %s", (stream,))
        got_us, got_state = cur.fetchone()
    recorded = timedelta(microseconds=got_us)
    catalog.remember_interval(stream, recorded, got_state)
    return recorded
