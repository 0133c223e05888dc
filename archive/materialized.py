"""Materialized history of intermediate streams (M 4.2): rows a replica computed from
raw chunks, written so that re-running never duplicates them.

A replica's rows carry ``_batch = MATERIALIZED`` (live micro-batches have ids >= 0).
:func:`replace_materialization` swaps one chunk's replica rows for a new set in one
transaction, skips rows whose key the live query already archived (and a live batch
deletes replica rows of the keys it writes, :func:`supersede`), and records the tag
on the raw chunks it was computed from, in the chunk catalog. So a re-run replaces, an
interrupted run leaves each chunk either wholly old or wholly new, and ``--resume``
knows which raw chunks are done.

The functions taking ``arch`` use the public surface of an
:class:`~archive.archiver.Archiver`: its ``catalog``, ``present`` cache and ``db``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from archive import chunks, simindex
from archive.catalog import has_partition
from archive.copy import copy_binary, frame_to_copy_binary
from archive.errors import MaterializationError
from archive.ids import source_ids
from archive.names import partition_name, quote
from archive.validate import split_batch

MATERIALIZED = -1


def replace_materialization(arch, stream: str, chunk_id: int, frame: pd.DataFrame, key: str | None,
                            sources: Iterable[tuple[str, int]], tag: str) -> int:
    """Replace the replica rows of ``stream``'s chunk ``chunk_id`` with ``frame``.

    Rows must lie inside the chunk. ``key`` (e.g. the event id column) names rows the
    live query may already have archived; those are not written again. ``sources`` are
    the raw ``(stream, chunk_id)`` the rows were computed from; each gets ``tag`` in its
    catalog ``materialized`` list. Returns the number of rows written.
    """
    catalog = arch.catalog
    spec = catalog.stream(stream)
    good, dead = split_batch(frame, spec.ts_col, spec.columns, stream)
    if dead:
        raise MaterializationError(f"replica output for {stream!r} chunk {chunk_id} has a malformed row: "
                                   f"{dead[0].reason} ({dead[0].row})")
    if len(good):
        us = good[spec.ts_col].astype("int64").to_numpy()
        outside = np.floor_divide(us, catalog.grid_of(stream).span_us) != chunk_id
        if outside.any():
            bad = good[spec.ts_col][outside].iloc[0]
            raise MaterializationError(f"replica output for {stream!r} chunk {chunk_id} has a row at {bad}, "
                                       "outside the chunk")
        good["_sid"] = source_ids(stream, good, spec.id_columns)
        good["_batch"] = np.int64(MATERIALIZED)
    part = quote(partition_name(stream, chunk_id))
    with catalog.transaction() as conn, conn.cursor() as cur:
        lock_chunk(cur, stream, chunk_id)
        exists = has_partition(cur, partition_name(stream, chunk_id))
        deleted = 0
        if exists:
            cur.execute(f"DELETE FROM {part} WHERE _batch = %s", (MATERIALIZED,))
            deleted = cur.rowcount
            if key is not None and len(good):
                cur.execute(f"SELECT DISTINCT {quote(key)}::text FROM {part}")
                live = {r[0] for r in cur.fetchall()}
                good = good[~good[key].astype(str).isin(live)]
        if len(good):
            if not exists:
                chunks.create_in(catalog, cur, spec, [chunk_id], True)
            types = spec.stored_columns
            cols = [c for c, _ in types]
            copy_binary(cur, stream, cols, frame_to_copy_binary(good, types))
        if exists or len(good):
            cur.execute("UPDATE moirae_chunks SET rows = rows - %s + %s WHERE stream = %s AND chunk_id = %s",
                        (deleted, len(good), stream, chunk_id))
        _tag(cur, sources, tag)
    arch.present.invalidate(stream, chunk_id)
    simindex.invalidate(catalog.db, stream, [chunk_id])  # re-materialized: the chunk's similarity index is stale
    return len(good)


def lock_chunk(cur, stream: str, chunk_id: int) -> None:
    """Hold, until the transaction ends, the lock that orders a chunk's replica
    replacement (:func:`replace_materialization`) against live writes of the same keys
    (:func:`supersede`): whichever commits second sees the first's rows."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", (stream, int(chunk_id) & 0x7FFFFFFF))


def supersede(cur, stream: str, key: str, keys_per_chunk: Mapping[int, Iterable]) -> dict[int, int]:
    """Delete, in a live batch's transaction, the replica rows of ``stream`` whose
    ``key`` the batch writes into the same chunk; the rows deleted per chunk.

    A replica of a chunk that is still growing (M 4.2: the replica task walks the present
    tier too) can run before the live event-query emits an event it detected first, since
    raw rows are archived before the watermark lets Spark emit their window. The live row
    is the event, and it supersedes the replica's. With :func:`replace_materialization`
    skipping keys the live query archived, each key is then stored once, whichever of the
    two commits first. The chunks' locks are taken in ascending order.
    """
    deleted: dict[int, int] = {}
    for cid in sorted(keys_per_chunk):
        values = sorted({str(v) for v in keys_per_chunk[cid]})
        if not values:
            continue
        lock_chunk(cur, stream, cid)
        cur.execute(f"DELETE FROM {quote(partition_name(stream, cid))} WHERE _batch = %s AND {quote(key)}::text = ANY(%s)",
                    (MATERIALIZED, values))
        if cur.rowcount:
            deleted[cid] = cur.rowcount
    return deleted


def tag_sources(arch, sources: Iterable[tuple[str, int]], tag: str) -> None:
    """Record ``tag`` on the raw ``(stream, chunk_id)`` chunks a replica was computed
    from (in one transaction): :func:`materialized_chunks` then counts them done."""
    sources = list(sources)
    if not sources:
        return
    with arch.catalog.transaction() as conn, conn.cursor() as cur:
        _tag(cur, sources, tag)


def _tag(cur, sources: Iterable[tuple[str, int]], tag: str) -> None:
    for src, cid in sources:
        cur.execute("UPDATE moirae_chunks SET materialized = ARRAY(SELECT DISTINCT unnest(materialized || %s)) "
                    "WHERE stream = %s AND chunk_id = %s", ([tag], src, cid))


def materialized_chunks(arch, stream: str, tag: str) -> set[int]:
    """Raw chunks of ``stream`` whose catalog row carries ``tag``."""
    return {c.chunk_id for c in arch.chunks(stream) if tag in c.materialized}
