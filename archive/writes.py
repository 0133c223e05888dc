"""The driver's write path: exactly-once appends of micro-batches, and the commit of a
micro-batch whose partitions the executors archived (:mod:`archive.exec_sink`).

Exactly-once: ``(stream, batch_id)`` enters the batch log ``moirae_batches`` in the same
transaction as the batch's rows, so a replayed batch writes nothing (``duplicate``). A
batch touching more chunks than one transaction may lock
(:data:`archive.chunks.MAX_CHUNKS_PER_BATCH`) is written in pieces
(:func:`archive.chunks.pieces`), one transaction each: every piece but the last records
``(stream, batch, -1, piece)`` in ``moirae_batch_parts`` with its rows, and the last
writes the batch log and forgets those records. A batch killed between pieces is
replayed whole: the pieces recorded are skipped, the rest written; nothing is lost or
written twice. Such a batch is exactly-once but not atomic: a reader may see its earlier
pieces before the last commits, as it may see some executor partitions of a batch
before the driver commits it.
Malformed rows go to the dead-letter table with a reason; rows whose chunk has left the
present tier are archived into it and counted late. Chunks are created first, in short
transactions of their own (:func:`archive.chunks.ensure_chunks`). The present tier's
memory mirror (:class:`archive.present.PresentCache`) follows commit order: one writer
per stream at a time.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
from psycopg2.extras import execute_values

from archive import chunks, simindex
from archive.abc import AppendResult, Tier
from archive.catalog import Catalog
from archive.copy import copy_binary, frame_to_copy_binary
from archive.ids import source_ids
from archive.materialized import supersede
from archive.present import PresentCache
from archive.streams import StreamSpec
from archive.types import NULLABLE_DTYPES
from archive.validate import insert_dead_letters, split_batch

_ADD_COUNTS = ("UPDATE moirae_chunks AS c SET rows = c.rows + v.n, late_rows = c.late_rows + v.l "
               "FROM (VALUES %s) AS v(stream, cid, n, l) WHERE c.stream = v.stream AND c.chunk_id = v.cid")
_COUNTS_ROW = "(%s, %s::bigint, %s::bigint, %s::bigint)"


DRIVER_PART = -1
"""The ``moirae_batch_parts.part`` of a driver append's pieces (executors' parts are >= 0)."""


@dataclass(frozen=True)
class _Piece:
    """Piece ``index`` of a batch; ``final``: the one that writes the batch log;
    ``several``: the batch has more than one; ``rows``, ``dead``: the whole batch's."""

    index: int
    final: bool
    several: bool
    rows: int
    dead: int


def _claim(cur, stream: str, batch_id: int, piece: _Piece, per_chunk: dict[int, int], late: dict[int, int]) -> bool:
    """Inside the piece's transaction: record it (the last piece: the batch, in the batch
    log; an earlier one: the piece, in ``moirae_batch_parts``); False when it is recorded
    already. An earlier piece also checks the batch log, which a concurrent replay may
    have written since."""
    if piece.final:
        cur.execute("INSERT INTO moirae_batches (stream, batch_id, rows, dead_letters) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING batch_id", (stream, batch_id, piece.rows, piece.dead))
        return cur.fetchone() is not None
    cur.execute("INSERT INTO moirae_batch_parts (stream, batch_id, part, piece, rows, dead_letters, chunks) "
                "VALUES (%s, %s, %s, %s, %s, 0, %s) ON CONFLICT DO NOTHING RETURNING part",
                (stream, batch_id, DRIVER_PART, piece.index, sum(per_chunk.values()),
                 json.dumps({str(c): [n, late.get(c, 0)] for c, n in per_chunk.items()})))
    if cur.fetchone() is None:
        return False
    cur.execute("SELECT EXISTS (SELECT 1 FROM moirae_batches WHERE stream = %s AND batch_id = %s)", (stream, batch_id))
    return not cur.fetchone()[0]


def _logged(catalog: Catalog, stream: str, batch_id: int) -> bool:
    with catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("SELECT EXISTS (SELECT 1 FROM moirae_batches WHERE stream = %s AND batch_id = %s)",
                    (stream, batch_id))
        return bool(cur.fetchone()[0])


class Writes:
    """Appends and commits of one archive (module doc). Thread-safe."""

    def __init__(self, catalog: Catalog, present: PresentCache) -> None:
        self.catalog = catalog
        self.present = present
        self._locks: dict[str, threading.Lock] = {}

    def stream_lock(self, stream: str) -> threading.Lock:
        """The lock one writer of ``stream`` holds (the mirror follows commit order)."""
        with self.catalog.lock:
            return self._locks.setdefault(stream, threading.Lock())

    def append(self, spec: StreamSpec, batch_id: int, data: pd.DataFrame | pa.Table, bulk: bool,
               key: str | None) -> AppendResult:
        """See :meth:`archive.archiver.Archiver.append`."""
        if key is not None and key not in spec.columns:
            raise ValueError(f"append to {spec.name!r}: key {key!r} is not one of its columns {list(spec.columns)}")
        with self.stream_lock(spec.name):
            # a lost connection rolled the transaction back (or committed it, and the batch
            # log makes the retry a no-op): the whole append is retried through an outage
            return self.catalog.db.retry(lambda: self._append(spec, batch_id, data, bulk, key),
                                         f"append to {spec.name!r}")

    def _rows(self, spec: StreamSpec, batch_id: int, data) -> tuple[pd.DataFrame, list, np.ndarray, list[int]]:
        """The batch's archivable rows (with ``_sid``, ``_batch``, cluster order), its
        dead letters, each row's chunk id and the sorted chunks touched."""
        frame = data.to_pandas(types_mapper=NULLABLE_DTYPES.get) if isinstance(data, pa.Table) else data
        good, dead = split_batch(frame, spec.ts_col, spec.columns, spec.name)
        if "_sid" not in good.columns:
            good["_sid"] = source_ids(spec.name, good, spec.id_columns)
        good["_batch"] = np.int64(batch_id)
        keys = self.catalog.cluster_keys(spec.name)
        if keys and len(good) > 1:  # each chunk's rows sorted by them, as the executors write (archive.contributors)
            good = good.sort_values(list(keys), kind="stable", ignore_index=True)
        us = good[spec.ts_col].astype("int64").to_numpy() if len(good) else np.empty(0, dtype=np.int64)
        # the interval, chosen or revised with this batch's density first (archive.chunks.settle)
        settled = self.catalog.interval(spec.name) is not None and not self.catalog.provisional(spec.name)
        grid = (chunks.settle(self.catalog, spec.name, None if settled else chunks.Evidence.of(us), self.present)
                if len(us) else self.catalog.grid_of(spec.name))
        chunk_ids = np.floor_divide(us, grid.span_us)
        touched = sorted({int(c) for c in np.unique(chunk_ids)})
        return good, dead, chunk_ids, touched

    def _append(self, spec: StreamSpec, batch_id: int, data, bulk: bool, key: str | None) -> AppendResult:
        stream = spec.name
        good, dead, chunk_ids, touched = self._rows(spec, batch_id, data)
        chunks.ensure_chunks(self.catalog, spec, touched, bulk)  # creation in short transactions of its own
        groups = chunks.pieces(touched)
        late: dict[int, int] = {}
        for k, group in enumerate(groups):
            if len(groups) == 1:
                rows, ids = good, chunk_ids
            else:
                mask = np.isin(chunk_ids, group)
                rows, ids = good[mask].reset_index(drop=True), chunk_ids[mask]
            final = k == len(groups) - 1
            piece = _Piece(k, final, len(groups) > 1, len(good), len(dead))
            done = self._write_piece(spec, batch_id, piece, rows, ids, group, dead if final else [], bulk, key)
            if done is None:  # the batch is in the batch log: a replay
                return AppendResult(stream, batch_id, 0, 0, 0, True, ())
            if final:  # the last piece's late rows include the earlier pieces' (recorded)
                late = done
        newest = good[spec.ts_col].max().to_pydatetime() if len(good) else None
        return AppendResult(stream, batch_id, len(good), sum(late.values()), len(dead), False, tuple(touched), newest)

    def _write_piece(self, spec: StreamSpec, batch_id: int, piece: _Piece, good: pd.DataFrame, chunk_ids: np.ndarray,
                     touched: list[int], dead: list, bulk: bool, key: str | None) -> dict[int, int] | None:
        """Write one piece of a batch (module doc) in one transaction: its rows, those of
        ``touched`` chunks; returns the late rows per chunk (for the last piece of several,
        those of the earlier pieces too, as recorded), ``{}`` for a piece committed
        before, None when the whole batch is in the batch log."""
        stream = spec.name
        late: dict[int, int] = {}
        per_chunk: dict[int, int] = {}
        superseded: dict[int, int] = {}
        whole: set[int] = set()
        with self.catalog.transaction() as conn, conn.cursor() as cur:
            tiers_now = chunks.create_in(self.catalog, cur, spec, touched, bulk)
            if len(good):
                ids, counts = np.unique(chunk_ids, return_counts=True)
                for cid, n in zip(ids.tolist(), counts.tolist(), strict=True):
                    per_chunk[cid] = n
                    if tiers_now[cid] is not Tier.PRESENT and not bulk:
                        late[cid] = n
            if not _claim(cur, stream, batch_id, piece, per_chunk, late):
                conn.rollback()
                return None if piece.final or _logged(self.catalog, stream, batch_id) else {}
            if piece.final and piece.several:  # the earlier pieces' records give way to the batch log
                cur.execute("DELETE FROM moirae_batch_parts WHERE stream = %s AND batch_id = %s AND part = %s "
                            "RETURNING chunks", (stream, batch_id, DRIVER_PART))
                for (recorded,) in cur.fetchall():
                    for cid, (_, lt) in recorded.items():
                        late[int(cid)] = late.get(int(cid), 0) + lt
            if len(good):
                if key is not None:
                    keys = good[key].to_numpy()
                    superseded = supersede(cur, stream, key, {c: keys[chunk_ids == c] for c in touched})
                whole = _copy_and_count(cur, spec, good, per_chunk, {c: n for c, n in late.items() if c in per_chunk},
                                        superseded)
            if dead:
                insert_dead_letters(cur, stream, batch_id, dead)
        self._mirror(spec, good, chunk_ids, tiers_now, bulk, whole)
        for cid in superseded:  # the mirror may hold the replica rows just deleted: reload from SQL
            self.present.invalidate(stream, cid)
        simindex.invalidate(self.catalog.db, stream, per_chunk)  # a chunk's similarity index is of its old rows
        return late

    def _mirror(self, spec: StreamSpec, good: pd.DataFrame, chunk_ids: np.ndarray, tiers_now: dict[int, Tier],
                bulk: bool, whole: set[int]) -> None:
        for cid, tier in tiers_now.items():
            if tier is not Tier.PRESENT or bulk:
                # a non-present chunk read through present_frame() must not stay stale
                self.present.invalidate(spec.name, cid)
            else:
                rows = good[chunk_ids == cid].drop(columns=["_batch"])
                self.present.add(spec.name, cid, rows, whole=cid in whole)

    def commit_parts(self, spec: StreamSpec, batch_id: int) -> AppendResult:
        """See :meth:`archive.archiver.Archiver.commit_parts`."""
        stream = spec.name
        with self.stream_lock(stream), self.catalog.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT rows, dead_letters, chunks, max_us FROM moirae_batch_parts "
                        "WHERE stream = %s AND batch_id = %s", (stream, batch_id))
            parts = cur.fetchall()
            rows = sum(p[0] for p in parts)
            dead = sum(p[1] for p in parts)
            newest = max((p[3] for p in parts if p[3] is not None), default=None)
            per_chunk, late = _part_counts(parts)
            cur.execute(
                "INSERT INTO moirae_batches (stream, batch_id, rows, dead_letters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING batch_id", (stream, batch_id, rows, dead))
            if cur.fetchone() is None:
                conn.rollback()
                return AppendResult(stream, batch_id, 0, 0, 0, True, ())
            if per_chunk:
                execute_values(cur, _ADD_COUNTS, [(stream, cid, n, late.get(cid, 0)) for cid, n in per_chunk.items()],
                               template=_COUNTS_ROW, page_size=100_000)
            cur.execute("DELETE FROM moirae_batch_parts WHERE stream = %s AND batch_id = %s", (stream, batch_id))
        for cid in per_chunk:
            self.present.invalidate(stream, cid)
        max_ts = None if newest is None else datetime.fromtimestamp(0, UTC) + timedelta(microseconds=newest)
        return AppendResult(stream, batch_id, rows, sum(late.values()), dead, False, tuple(sorted(per_chunk)), max_ts)


def _copy_and_count(cur, spec: StreamSpec, good: pd.DataFrame, per_chunk: dict[int, int], late: dict[int, int],
                    superseded: dict[int, int]) -> set[int]:
    """COPY ``good`` into the stream and add the counts to the catalog (the rows
    superseded leave it); returns the chunks whose rows are all in this batch, which a
    present mirror may then hold whole."""
    types = spec.stored_columns
    copy_binary(cur, spec.name, [c for c, _ in types], frame_to_copy_binary(good, types))
    totals = execute_values(
        cur, _ADD_COUNTS + " RETURNING c.chunk_id, c.rows",
        [(spec.name, cid, n - superseded.get(cid, 0), late.get(cid, 0)) for cid, n in per_chunk.items()],
        template=_COUNTS_ROW, page_size=100_000, fetch=True)
    return {cid for cid, total in totals if total == per_chunk.get(cid)}


def _part_counts(parts: list[tuple]) -> tuple[dict[int, int], dict[int, int]]:
    """Rows and late rows per chunk, summed over the batch's partition records."""
    per_chunk: dict[int, int] = {}
    late: dict[int, int] = {}
    for _, _, by_chunk, _ in parts:
        for cid, (n, lt) in by_chunk.items():
            per_chunk[int(cid)] = per_chunk.get(int(cid), 0) + n
            late[int(cid)] = late.get(int(cid), 0) + lt
    return per_chunk, late
