"""Archiving from the executors (M 4.1; docs/ARCHITECTURE.md, a row from its source to
the archive): each partition of a
micro-batch COPYs its own rows into PostgreSQL, in PostgreSQL's binary format.

Exactly-once per partition: the row ``(stream, batch id, partition id, piece)`` of
``moirae_batch_parts`` is inserted in the same transaction as the piece's rows and
dead letters, so a partition that a replayed batch (or a retried task) writes again
is a no-op. A partition whose rows reach more chunks than one transaction may lock is
written in several pieces (:func:`archive.chunks.pieces`, deterministic for the same
rows), each exactly once: a task killed between two pieces is retried (or its batch
replayed) and writes only the pieces not yet committed. The part row also records how many rows (and late rows) went to each
chunk and the newest event time; the driver sums those into the chunk catalog when it
commits the whole batch (:meth:`archive.archiver.Archiver.commit_parts`), and deletes
the part rows then.

A partition's rows are COPYed as the JVM hands them over, Arrow batch by Arrow batch
(for a clustered stream, block by sorted block), creating the chunks they reach
(:mod:`archive.exec_stream`); staged rows, and a partition for which that gives up, are
written once the whole partition has arrived (:func:`write_partition`, here). The
objects Spark runs in its workers are in :mod:`archive.exec_udf`.

Each chunk's rows go straight into the chunk's partition (:func:`by_chunk`). The batch
is read once, new chunks included: a partition whose rows fall into chunks
that do not exist yet creates them itself, with the driver's code
(:func:`archive.chunks.create_chunks`), in short transactions it commits before its data
transaction opens, on the same connection. The new chunks' tiers follow the stream's
horizon as the driver saw it when it built the job. Only a chunk that is gone again by
the time the rows are written (dropped by retention meanwhile) makes the driver create
it and run the batch again.

This module runs inside Spark's Python workers: it imports only the archive's pure
modules and psycopg2, and connects with the DSN it is given (on a cluster, one the
executors can reach; see ``archive.executor_dsn`` in the README).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from archive import chunks as chunk_sql
from archive.copy import arrow_to_copy_binary, copy_binary
from archive.names import partition_name, stage_name
from archive.streams import StreamSpec
from archive.types import NULLABLE_DTYPES, ColumnType
from archive.validate import insert_dead_letters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionJob:
    """Everything an executor needs to archive its partition of one micro-batch.

    ``horizon`` is the stream's expiry horizon as the driver saw it when it built the
    job (:meth:`archive.archiver.Archiver.horizon`), and ``bulk`` whether the batch
    loads history: with them an executor gives a chunk it creates the tier the driver
    would have. The horizon may move on the driver while the job runs; a chunk then
    created present that the horizon has already passed is demoted by the next
    demotion pass, which looks at every present chunk against the newest horizon
    (:func:`archive.tiers.demote`), just as a chunk the driver created a moment before
    the horizon moved."""

    dsn: str
    schema: str | None
    spec: StreamSpec
    batch_id: int
    span_us: int
    after_commit: Callable[[int, int], None] | None = None  # (batch id, part): a test hook
    retry_seconds: float = 60.0  # how long an executor retries a partition while PostgreSQL is unreachable
    horizon: datetime | None = None
    bulk: bool = False
    skip: bool = False  # the batch is in the batch log already (a replay): write nothing
    cluster: tuple[str, ...] = ()  # each chunk's rows are written sorted by these columns


def write_with_retry(job: PartitionJob, part: int, table: pa.Table) -> tuple[int, int, bool, list[int]]:
    """:func:`write_partition`, again with backoff (0.1 s doubling to 5 s) while the
    server is unreachable, for at most ``job.retry_seconds``, as the driver's
    ``Database.retry`` does. Safe to repeat: the partition's row in
    ``moirae_batch_parts`` commits with its rows, so an attempt whose commit did reach
    the server is found and reported as a duplicate, never written twice. Other errors
    (bad data, a batch too wide) fail at once."""
    from archive.pg import DatabaseUnavailable, is_connection_lost

    deadline = time.monotonic() + job.retry_seconds
    delay = 0.1
    while True:
        try:
            return write_partition(job, part, table)
        except Exception as exc:
            if not is_connection_lost(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(f"executor writing batch {job.batch_id} part {part} of stream "
                                          f"{job.spec.name!r}: PostgreSQL unreachable for {job.retry_seconds:g}s: "
                                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from exc
            log.warning("executor: batch %s part %s of %r: PostgreSQL unreachable, retrying in %.1f s: %s",
                        job.batch_id, part, job.spec.name, delay, exc)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def write_partition(job: PartitionJob, part: int, table: pa.Table) -> tuple[int, int, bool, list[int]]:
    """Archive one partition, in one transaction per piece: at most
    :data:`archive.chunks.MAX_CHUNKS_PER_BATCH` chunks each (:func:`archive.chunks.pieces`;
    the dead letters go with piece 0). Returns (rows, dead letters, duplicate, missing
    chunks) of what this call wrote; duplicate when every piece was written before.
    Chunks the rows fall into that do not exist yet are created first
    (:func:`create_missing`); one still missing when a piece's data transaction reads
    the catalog (dropped meanwhile) is returned and that piece is not written: the
    driver creates it and runs the batch again, whose pieces already written are then
    no-ops.

    A job without a chunk interval (``span_us`` 0: a shared read's batch while the
    stream's interval waits for a rate, :mod:`archive.shared`) COPYs its rows into the
    stream's stage table instead, from which the driver archives them."""
    spec = job.spec
    good, dead = split_arrow(table, spec)
    good = sort_by(good, job.cluster)  # see archive.contributors: BRIN then skips other keys' rows
    conn = worker_connection(job.dsn, job.schema)
    try:
        if not good.num_rows or job.span_us <= 0:
            return _write_piece(conn, job, part, 0, good, None, dead)
        us = np.asarray(good.column(spec.ts_col).cast(pa.int64()))
        chunk_of = np.floor_divide(us, job.span_us)
        groups = chunk_sql.pieces(np.unique(chunk_of).tolist())
        rows = dead_written = 0
        duplicate = True
        for k, group in enumerate(groups):
            if len(groups) == 1:
                rows_k, chunk_k = good, chunk_of
            else:
                mask = np.isin(chunk_of, group)
                rows_k, chunk_k = good.filter(pa.array(mask)), chunk_of[mask]
            n, d, dup, missing = _write_piece(conn, job, part, k, rows_k, (chunk_k, group), dead if k == 0 else [])
            if missing:
                return rows, dead_written, False, missing
            rows, dead_written, duplicate = rows + n, dead_written + d, duplicate and dup
        return rows, dead_written, duplicate, []
    except BaseException:
        drop_worker_connection(job.dsn, job.schema)
        raise


def _write_piece(conn, job: PartitionJob, part: int, piece: int, good: pa.Table,
                 layout: tuple[np.ndarray, list[int]] | None, dead: list) -> tuple[int, int, bool, list[int]]:
    """One piece of :func:`write_partition` in one transaction: ``good``'s rows (each
    row's chunk and the chunks ascending in ``layout``; None: staged, or no rows) and
    ``dead``, recorded as ``(stream, batch, part, piece)`` in ``moirae_batch_parts``."""
    spec = job.spec
    with conn.cursor() as cur:
        chunks: dict[int, list[int]] = {}
        max_us = None
        if good.num_rows:
            max_us = int(pc.max(good.column(spec.ts_col).cast(pa.int64())).as_py())
        if layout is not None:
            chunk_of, ids = layout
            counts = np.unique(chunk_of, return_counts=True)[1]
            tiers, missing = _existing(conn, cur, job, ids)
            if missing:
                conn.rollback()
                return 0, 0, False, missing
            # rows into a chunk that has left the present tier are late (M 4.1)
            chunks = {c: [n, n if tiers[c] != "present" else 0] for c, n in zip(ids, counts.tolist(), strict=True)}
        cur.execute("INSERT INTO moirae_batch_parts (stream, batch_id, part, piece, rows, dead_letters, chunks, "
                    "max_us) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING part",
                    (spec.name, job.batch_id, part, piece, good.num_rows, len(dead), json.dumps(chunks), max_us))
        if cur.fetchone() is None:
            conn.rollback()
            return 0, 0, True, []
        if good.num_rows:
            copy_rows(cur, job, good, layout)
        if dead:
            insert_dead_letters(cur, spec.name, job.batch_id, dead)
    conn.commit()
    return good.num_rows, len(dead), False, []


def _existing(conn, cur, job: PartitionJob, ids: list[int]) -> tuple[dict[int, str], list[int]]:
    """The tiers of chunks ``ids`` in the catalog, creating the missing ones first
    (:func:`create_missing`, each creation a transaction of its own); and those still
    missing when the data transaction (begun here) reads the catalog again."""
    tiers = catalog_tiers(cur, job.spec.name, ids)
    missing = [c for c in ids if c not in tiers]
    if missing:
        conn.rollback()  # end the read: each creation is a transaction of its own
        create_missing(conn, job, missing)
        tiers = catalog_tiers(cur, job.spec.name, ids)  # the data transaction starts here
        missing = [c for c in ids if c not in tiers]
    return tiers, missing


def copy_rows(cur, job: PartitionJob, good: pa.Table, layout: tuple[np.ndarray, list[int]] | None) -> None:
    """COPY ``good`` (with ``_batch`` added) into each chunk's partition, ``layout`` being
    each row's chunk and the chunks ascending; or, without a layout, into the stage."""
    spec = job.spec
    good = good.append_column("_batch", pa.array(np.full(good.num_rows, job.batch_id, dtype=np.int64)))
    types = spec.stored_columns
    columns = [c for c, _ in types]
    if layout is None:
        copy_binary(cur, stage_name(spec.name), columns, arrow_to_copy_binary(good, types))
        return
    for cid, rows in by_chunk(good, *layout):
        copy_binary(cur, partition_name(spec.name, cid), columns, arrow_to_copy_binary(rows, types))


def sort_by(table: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """``table``'s rows sorted by ``keys``, ascending and stable (as they are without keys).

    >>> t = pa.table({"k": [2, 1, 2, 1], "n": [0, 1, 2, 3]})
    >>> sort_by(t, ("k",)).column("n").to_pylist(), sort_by(t, ()).column("n").to_pylist()
    ([1, 3, 0, 2], [0, 1, 2, 3])
    """
    if not keys or table.num_rows < 2:
        return table
    return table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys]))


def by_chunk(table: pa.Table, chunk_of: np.ndarray, chunk_ids: list[int]) -> Iterator[tuple[int, pa.Table]]:
    """Each of ``chunk_ids`` (ascending, every chunk some row falls in) with its rows of
    ``table``, whose row ``i`` falls in chunk ``chunk_of[i]``; rows keep their order.

    The executor COPYs each chunk's rows straight into the chunk's partition, not into the
    stream's table: PostgreSQL then routes no tuple, a sizeable share of its CPU per row,
    and PostgreSQL is what bounds the archive's rate (BENCHMARKS.md, engine_jvm).
    Ascending chunk order also makes
    every writer lock the partitions in one order. A partition still checks its bounds,
    so a row in the wrong chunk fails rather than landing there.

    >>> t = pa.table({"x": [1, 2, 3, 4]})
    >>> [(c, r.column("x").to_pylist()) for c, r in by_chunk(t, np.array([7, 5, 7, 5]), [5, 7])]
    [(5, [2, 4]), (7, [1, 3])]
    """
    if len(chunk_ids) == 1:
        yield chunk_ids[0], table
        return
    order = np.argsort(chunk_of, kind="stable")
    ordered = chunk_of[order]
    starts = np.searchsorted(ordered, chunk_ids, side="left")
    ends = np.searchsorted(ordered, chunk_ids, side="right")
    rows = table.take(pa.array(order))
    for cid, start, end in zip(chunk_ids, starts.tolist(), ends.tolist(), strict=True):
        yield cid, rows.slice(start, end - start)


def create_missing(conn, job: PartitionJob, chunk_ids: list[int]) -> None:
    """Create ``chunk_ids`` of the job's stream on ``conn``, which must have no
    transaction open, at most :data:`archive.chunks.CHUNKS_PER_TRANSACTION` per
    transaction, each committed before the next (and before the caller writes).

    A partition is attached to the stream's table (:func:`archive.chunks.partition_ddl`),
    which does not wait for the other partitions' open COPYs, and those never wait for a
    creator (they write only to chunks they found in the catalog). The creator waits for
    the stream's index DDL or a retention drop, which may wait for those COPYs, but not
    for anything this connection holds: no transaction is open on it. The streamed writer
    creates beside its open data transaction instead, with a bounded wait
    (:func:`archive.exec_stream.create_beside`).
    Two partitions of one batch may both find a chunk missing; the second finds it
    created once the first commits (:func:`archive.chunks.create_chunks`)."""
    for group in chunk_sql.in_groups(chunk_ids):
        with conn.cursor() as cur:
            chunk_sql.create_chunks(cur, job.spec, job.span_us, group, job.horizon, job.bulk)
        conn.commit()


def catalog_tiers(cur, stream: str, chunk_ids: list[int]) -> dict[int, str]:
    """The tier of each of ``chunk_ids`` that exists (not dropped) in the catalog."""
    cur.execute("SELECT chunk_id, tier FROM moirae_chunks WHERE stream = %s AND chunk_id = ANY(%s) "
                "AND NOT dropped", (stream, chunk_ids))
    return dict(cur.fetchall())


def split_arrow(table: pa.Table, spec: StreamSpec):
    """The archivable rows (an Arrow table) and the dead letters of one partition.

    The batch was cast to the stream's types in Spark, so the only bad rows left are
    those without an event time or with a NUL in a text value; those few go through
    :func:`archive.validate.split_batch`, which names the column and value.
    """
    from archive.validate import split_batch

    bad = table.column(spec.ts_col).is_null()
    for c, t in spec.columns.items():
        if t is ColumnType.TEXT:
            bad = pc.or_(bad, pc.fill_null(pc.match_substring(table.column(c), "\x00"), False))
    if not pc.any(bad).as_py():
        return table, []
    bad_rows = table.filter(bad).drop_columns(["_sid"]).to_pandas(types_mapper=NULLABLE_DTYPES.get)
    again, dead = split_batch(bad_rows, spec.ts_col, spec.columns, spec.name)
    if len(again):  # split_batch accepted a NUL: let PostgreSQL decide, as the driver path does
        return table, []
    return table.filter(pc.invert(bad)), dead


_CONNECTIONS: dict[tuple[str, str | None], object] = {}  # in order of last use, oldest first
#: How many (database, schema) connections a Python worker keeps open at most.
MAX_KEPT_CONNECTIONS = 2


def worker_connection(dsn: str, schema: str | None):
    """One connection per Python worker and database, reused across tasks (Spark keeps
    its Python workers between tasks). A worker keeps those of its last
    :data:`MAX_KEPT_CONNECTIONS` databases or schemas and closes older ones: a Spark
    session outlives an engine, and each engine with a schema of its own (a test, a
    benchmark run, a redeploy) would otherwise leave every worker one idle connection
    more, until the server refused new clients."""
    key = (dsn, schema)
    conn = _CONNECTIONS.pop(key, None)
    if conn is None or conn.closed:
        conn = connect(dsn, schema)
    _CONNECTIONS[key] = conn  # the most recently used last
    while len(_CONNECTIONS) > MAX_KEPT_CONNECTIONS:
        drop_worker_connection(*next(iter(_CONNECTIONS)))
    return conn


def connect(dsn: str, schema: str | None, lock_timeout_ms: int | None = None):
    """A new connection to ``dsn`` that finds the archive's tables in ``schema``, not in
    autocommit; ``lock_timeout_ms`` bounds each wait for a lock. It has the driver's
    client-side timeouts (:func:`archive.pg.client_timeouts`), so an executor writing to a
    vanished server fails its task instead of blocking. A DSN naming its application gets
    :func:`worker_application_name` of that name."""
    import psycopg2

    from archive.pg import client_timeouts

    options = [f"-c search_path={schema},public"] if schema else []
    if lock_timeout_ms is not None:
        options.append(f"-c lock_timeout={int(lock_timeout_ms)}")
    named = {"application_name": worker_application_name(app)} if (app := dsn_application_name(dsn)) else {}
    conn = psycopg2.connect(dsn, options=" ".join(options) or None, **client_timeouts(dsn), **named)
    conn.autocommit = False
    return conn


def worker_application_name(app: str) -> str:
    """The ``application_name`` of a Python worker's session for a DSN named ``app``:
    the name with ``/worker`` appended (within PostgreSQL's 63 bytes), so the sessions
    Spark's workers keep are told apart from the driver's in ``pg_stat_activity``."""
    return f"{app[:56]}/worker"


def dsn_application_name(dsn: str) -> str | None:
    """The ``application_name`` ``dsn`` names, or None (none named, or a DSN psycopg2
    cannot parse: connecting reports that)."""
    from psycopg2.extensions import parse_dsn

    try:
        return parse_dsn(dsn).get("application_name")
    except Exception:  # noqa: BLE001 - psycopg2 reports a bad DSN when it connects
        return None


def drop_worker_connection(dsn: str, schema: str | None) -> None:
    conn = _CONNECTIONS.pop((dsn, schema), None)
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - already broken
            pass
