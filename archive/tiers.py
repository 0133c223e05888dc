"""Tier transitions, retention and the archive's status (M 4.1).

- ``demote(horizon)``: present chunks whose end is <= the expiry horizon become recent
  and get the stream's indexes; the caller then tells the Similarity Recall index
  builders (:func:`archive.simindex.ready`) of the ``demote`` transitions. Bulk-loaded
  (old) chunks whose end is past it become present (``revive``), and any similarity
  index of theirs is dropped, since their rows will change. The horizon comes from
  Ananke (``min_K W_K - U``, A 5.1) or, for a stream no instrumented query reads, from
  its own watermark.
- ``age()``: of each stream's non-present chunks, the newest R are recent (indexed),
  the rest old (indexes dropped). Always whole chunks: DDL on one partition, never
  row-by-row deletes.
- ``apply_retention()``: per-stream policies over expired (old) chunks.

Every function takes the archive's :class:`~archive.catalog.Catalog`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from archive import simindex
from archive.abc import Tier
from archive.chunks import bump_version, vacuum_off
from archive.names import index_name, partition_name, quote
from archive.streams import Retention

if TYPE_CHECKING:
    from archive.catalog import Catalog
    from archive.present import PresentCache

#: PostgreSQL parallel maintenance workers a tier change's index build may start (:func:`_set_tier`)
INDEX_BUILD_WORKERS = 0

_QUALIFIED = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")


@dataclass(frozen=True)
class Transition:
    """One whole-chunk change: ``action`` is demote, revive, index, unindex, prune or drop."""

    stream: str
    chunk_id: int
    from_tier: Tier
    to_tier: Tier
    action: str
    rows: int = 0


@dataclass(frozen=True)
class Contributing:
    """Where provenance edges live: a table with a column of source ids. Source tuples
    whose id appears there contributed to some result (A 3)."""

    table: str
    column: str

    def __post_init__(self) -> None:
        for part in (self.table, self.column):
            if not _QUALIFIED.match(part):
                raise ValueError(f"contributing table/column must be SQL identifiers, got {part!r}")

    def sql(self) -> str:
        return ".".join(quote(p) for p in self.table.split(".")), quote(self.column)


def demote(catalog: Catalog, present: PresentCache, horizon: datetime,
           streams: Iterable[str] | None = None) -> list[Transition]:
    """Advance each stream's horizon to ``horizon`` (never backward), move its present
    chunks ending at or before the horizon to the recent tier (indexed, dropped from
    ``present``) and revive the bulk-loaded chunks the horizon has not passed."""
    if horizon.tzinfo is None:
        raise ValueError(f"demote: horizon must be timezone-aware, got {horizon!r}")
    out = []
    for name in (list(streams) if streams is not None else [s.name for s in catalog.streams()]):
        spec = catalog.stream(name)
        horizon_now = catalog.advance_horizon(name, horizon)
        for info in catalog.chunks(name, Tier.PRESENT):
            if info.end <= horizon_now:
                _set_tier(catalog, spec, info.chunk_id, Tier.RECENT, index=True)
                present.invalidate(name, info.chunk_id)
                out.append(Transition(name, info.chunk_id, Tier.PRESENT, Tier.RECENT, "demote", info.rows))
        out += _revive(catalog, spec, horizon_now)
    return out


def _revive(catalog: Catalog, spec, horizon: datetime) -> list[Transition]:
    """Bulk-loaded chunks (created old) that the horizon has not passed become present:
    their tuples can still contribute (M 4.1: only the horizon moves a chunk out of the
    present tier). Typically the chunk a loaded history ends in, which the live stream
    goes on to fill; left old, its live rows would count as late."""
    if spec.kind != "raw":  # a derived stream's chunks (and similarity indexes) are materialization's
        return []
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT chunk_id, tier, rows FROM moirae_chunks WHERE stream = %s AND NOT dropped "
                    "AND tier <> %s AND end_ts > %s", (spec.name, Tier.PRESENT.value, horizon))
        ahead = [Transition(spec.name, int(cid), Tier(t), Tier.PRESENT, "revive", int(n))
                 for cid, t, n in cur.fetchall()]
    for move in ahead:
        _set_tier(catalog, spec, move.chunk_id, Tier.PRESENT, index=False)
    simindex.invalidate(catalog.db, spec.name, [m.chunk_id for m in ahead])  # rows will change: rebuilt once sealed
    return ahead


def age(catalog: Catalog) -> list[Transition]:
    """Of each stream's non-present chunks, keep the newest R recent (indexed) and make
    the rest old (indexes dropped)."""
    out = []
    keep = catalog.settings.recent_chunks
    for spec in catalog.streams():
        behind = [c for c in catalog.chunks(spec.name) if c.tier is not Tier.PRESENT]
        for rank, info in enumerate(behind):
            want = Tier.RECENT if rank < keep else Tier.OLD
            if info.tier is want:
                continue
            _set_tier(catalog, spec, info.chunk_id, want, index=want is Tier.RECENT)
            out.append(Transition(spec.name, info.chunk_id, info.tier, want,
                                  "index" if want is Tier.RECENT else "unindex", info.rows))
    return out


def _set_tier(catalog: Catalog, spec, chunk_id: int, tier: Tier, index: bool) -> None:
    """Move one chunk to ``tier``, building or dropping its indexes, in one transaction.

    Tier changes of a stream take turns (a transaction-scoped advisory lock): ``CREATE
    INDEX IF NOT EXISTS`` is not safe against itself, since two transactions both find the
    index missing and the second fails on ``pg_class``'s unique name once the first
    commits. Two passes over one chunk happen: an engine's last maintenance pass beside a
    background one still building a large chunk's index, or two processes maintaining
    one archive. The lock is not the executors' chunk-creation lock, and a tier change
    waits only for the chunk's writers, so no cycle.

    An index is built by one server process (:data:`INDEX_BUILD_WORKERS`), without
    PostgreSQL's parallel maintenance workers: a tier change is background work beside
    the live path, like a history-query (:mod:`archive.history_plan`), and must not take
    the cores the live path runs on (BENCHMARKS.md has the measurement)."""
    part = partition_name(spec.name, chunk_id)
    names = []
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"moirae_tier:{spec.name}",))
        if index and spec.indexes:
            cur.execute("SET LOCAL max_parallel_maintenance_workers = %s", (INDEX_BUILD_WORKERS,))
        for n, cols in enumerate(spec.indexes):
            ix = index_name(spec.name, chunk_id, n)
            if index:
                cur.execute(f"CREATE INDEX IF NOT EXISTS {quote(ix)} ON {quote(part)} "
                            f"({', '.join(quote(c) for c in cols)})")
                names.append(ix)
            else:
                cur.execute(f"DROP INDEX IF EXISTS {quote(ix)}")
        if vacuum_off(spec, Tier.PRESENT):  # a stream whose present chunks autovacuum leaves alone
            cur.execute(f"ALTER TABLE {quote(part)} SET (autovacuum_enabled = {'off' if vacuum_off(spec, tier) else 'on'})")
        cur.execute("UPDATE moirae_chunks SET tier = %s, indexes = %s WHERE stream = %s AND chunk_id = %s",
                    (tier.value, names, spec.name, chunk_id))


def apply_retention(catalog: Catalog, contributing: Contributing | None) -> list[Transition]:
    """Act on expired tuples of old chunks, per stream policy:

    - ``keep_all``: nothing;
    - ``contributing_only``: delete the tuples with no provenance edge (needs
      ``contributing``; an edge to a retracted alert does not count,
      ``moirae/ingest/persist.py:contributing_view``), once per chunk; a chunk none of
      whose tuples has one is dropped whole;
    - ``drop_after_n_old_chunks``: drop whole partitions beyond the newest N old chunks.

    Only chunks wholly behind the stream's expiry horizon are touched.
    """
    out = []
    for spec in catalog.streams():
        policy = spec.retention.policy
        if policy is Retention.KEEP_ALL:
            continue
        horizon = catalog.horizon(spec.name)
        old = [c for c in catalog.chunks(spec.name, Tier.OLD) if horizon is not None and c.end <= horizon]
        if policy is Retention.CONTRIBUTING_ONLY:
            if contributing is None:
                raise ValueError(f"stream {spec.name!r} keeps contributing tuples only, but no provenance "
                                 "edge table was given to apply_retention()")
            table, column = contributing.sql()
            for info in old:
                part = quote(partition_name(spec.name, info.chunk_id))
                with catalog.transaction() as conn, conn.cursor() as cur:
                    cur.execute("SELECT pruned FROM moirae_chunks WHERE stream = %s AND chunk_id = %s FOR UPDATE",
                                (spec.name, info.chunk_id))
                    if cur.fetchone()[0]:
                        continue
                    cur.execute(f"SELECT EXISTS (SELECT 1 FROM {part} p WHERE EXISTS "
                                f"(SELECT 1 FROM {table} e WHERE e.{column} = p._sid))")
                    if not cur.fetchone()[0]:  # no row supports a result: the whole chunk goes
                        cur.execute(f"DROP TABLE IF EXISTS {part}")
                        cur.execute("UPDATE moirae_chunks SET pruned = true, dropped = true, rows = 0, "
                                    "indexes = '{}' WHERE stream = %s AND chunk_id = %s", (spec.name, info.chunk_id))
                        bump_version(cur, spec.name)
                        action, deleted = "drop", info.rows
                    else:
                        cur.execute(f"DELETE FROM {part} p WHERE NOT EXISTS "
                                    f"(SELECT 1 FROM {table} e WHERE e.{column} = p._sid)")
                        deleted = cur.rowcount
                        cur.execute("UPDATE moirae_chunks SET pruned = true, rows = rows - %s "
                                    "WHERE stream = %s AND chunk_id = %s", (deleted, spec.name, info.chunk_id))
                        action = "prune"
                simindex.invalidate(catalog.db, spec.name, [info.chunk_id])
                out.append(Transition(spec.name, info.chunk_id, Tier.OLD, Tier.OLD, action, deleted))
        elif policy is Retention.DROP_AFTER_N_OLD_CHUNKS:
            for info in old[spec.retention.n:]:
                with catalog.transaction() as conn, conn.cursor() as cur:
                    cur.execute(f"DROP TABLE IF EXISTS {quote(partition_name(spec.name, info.chunk_id))}")
                    cur.execute("UPDATE moirae_chunks SET dropped = true, rows = 0, indexes = '{}' "
                                "WHERE stream = %s AND chunk_id = %s", (spec.name, info.chunk_id))
                    bump_version(cur, spec.name)
                simindex.invalidate(catalog.db, spec.name, [info.chunk_id])
                out.append(Transition(spec.name, info.chunk_id, Tier.OLD, Tier.OLD, "drop", info.rows))
    return out


def status(catalog: Catalog, present: PresentCache) -> dict[str, Any]:
    """Chunks per stream and tier, rows, late rows and dead letters, as plain data."""
    streams: dict[str, Any] = {}
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT stream, tier, count(*), coalesce(sum(rows), 0), coalesce(sum(late_rows), 0) "
                    "FROM moirae_chunks WHERE NOT dropped GROUP BY stream, tier")
        tiers = cur.fetchall()
        cur.execute("SELECT stream, count(*) FROM moirae_dead_letters GROUP BY stream")
        dead = dict(cur.fetchall())
        cur.execute("SELECT stream, count(*) FROM moirae_chunks WHERE dropped GROUP BY stream")
        dropped = dict(cur.fetchall())
        cur.execute("SELECT stream, count(*) FROM moirae_batches GROUP BY stream")
        batches = dict(cur.fetchall())
    for spec in catalog.streams():
        streams[spec.name] = {
            "kind": spec.kind, "chunks": {t.value: 0 for t in Tier}, "rows": 0, "late_rows": 0,
            "dead_letters": int(dead.get(spec.name, 0)), "dropped_chunks": int(dropped.get(spec.name, 0)),
            "batches": int(batches.get(spec.name, 0)), "retention": spec.retention.to_json(),
            "horizon": h.isoformat() if (h := catalog.horizon(spec.name)) else None,
            "chunk_interval_seconds": catalog.grid_of(spec.name).span.total_seconds(),
            "chunk_interval_fixed": catalog.interval(spec.name) is not None and not catalog.provisional(spec.name),
            "chunk_interval_provisional": catalog.provisional(spec.name),  # "guess", "estimate" or None
        }
    for stream, tier, n, rows, late in tiers:
        s = streams.setdefault(stream, {"chunks": {t.value: 0 for t in Tier}, "rows": 0, "late_rows": 0})
        s["chunks"][tier] = int(n)
        s["rows"] += int(rows)
        s["late_rows"] += int(late)
    return {
        "chunk_span_seconds": catalog.settings.chunk_span.total_seconds(),
        "recent_chunks": catalog.settings.recent_chunks,
        "present_cache_rows": present.rows(),
        "streams": streams,
        "totals": {
            "rows": sum(s["rows"] for s in streams.values()),
            "late_rows": sum(s["late_rows"] for s in streams.values()),
            "dead_letters": sum(s.get("dead_letters", 0) for s in streams.values()),
        },
    }
