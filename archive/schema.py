"""The DDL of every archive table, and the schema version checked on open.

Fixed tables (created by :func:`open_schema`):

- ``moirae_streams``: the stream registry (columns, kind, indexes, retention, chunk
  interval, a version bumped whenever the stream's set of chunks changes);
- ``moirae_chunks``: the chunk catalog (one row per chunk: bounds, tier, counts, indexes);
- ``moirae_batches``: the batch log that makes appends exactly-once;
- ``moirae_batch_parts``: the records of a micro-batch's parts written so far, until its
  batch-log row commits: one per executor partition and *piece* (:mod:`archive.exec_sink`),
  or per piece of a driver append (``part`` -1, :mod:`archive.writes`). A piece is one
  transaction of at most :data:`archive.chunks.MAX_CHUNKS_PER_BATCH` chunks, so a batch
  spanning more chunks than one transaction may lock is written in several, each
  exactly once;
- ``moirae_dead_letters``: rows refused, with their reason;
- ``moirae_archive_state``: key/value state (each stream's expiry horizon, the schema
  version under :data:`VERSION_KEY`).

Created on first use: ``moirae_simindex`` and ``moirae_simvocab``
(:data:`SIMINDEX_DDL`, :mod:`archive.simindex`), ``moirae_reference_tables`` and
``moirae_reference_versions`` (:data:`REFERENCE_DDL`) with one table per reference table
(:func:`reference_table_ddl`, :mod:`archive.reference`), ``moirae_outages``
(:data:`OUTAGES_DDL`, :class:`archive.pg.Database`).

Per stream: its partitioned table (:func:`stream_table_ddl`), one partition per chunk
(:func:`partition_ddl`), and for a shared read its stage table (:func:`stage_table_ddl`).

Versioning. :data:`SCHEMA_VERSION` is stored in ``moirae_archive_state`` and checked by
:func:`open_schema` each time an Archiver opens a database: a fresh database gets the
current tables and version; an older version is migrated by the steps of
:data:`MIGRATIONS`; a newer or unknown version, or an older one with no migration, is
refused with one :class:`~archive.errors.SchemaVersionError` saying what to do.
"""

from __future__ import annotations

import json
from datetime import datetime

from archive.errors import SchemaVersionError
from archive.names import quote, stage_name

SCHEMA_VERSION = 2
"""The version of the archive's tables this code reads and writes (2: batch pieces and
provisional chunk intervals, :data:`V2_DDL`)."""

VERSION_KEY = "schema_version"
"""The ``moirae_archive_state`` key holding the stored version."""

DDL_LOCK = 7340001
"""The advisory lock every writer of the archive's shared DDL takes (one at a time)."""

CATALOG_DDL = """
CREATE TABLE IF NOT EXISTS moirae_streams (
    stream      text PRIMARY KEY,
    ts_col      text NOT NULL,
    columns     jsonb NOT NULL,
    kind        text NOT NULL DEFAULT 'raw',
    indexes     jsonb NOT NULL DEFAULT '[]',
    retention   jsonb NOT NULL DEFAULT '{"policy": "keep_all"}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- the stream's chunk interval in microseconds, fixed once its first chunk exists (archive.chunks)
ALTER TABLE moirae_streams ADD COLUMN IF NOT EXISTS chunk_us bigint CHECK (chunk_us > 0);
-- bumped whenever a chunk of the stream is created, revived or dropped (task-id caches)
ALTER TABLE moirae_streams ADD COLUMN IF NOT EXISTS chunks_version bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS moirae_chunks (
    stream       text NOT NULL REFERENCES moirae_streams(stream),
    chunk_id     bigint NOT NULL,
    start_ts     timestamptz NOT NULL,
    end_ts       timestamptz NOT NULL,
    tier         text NOT NULL CHECK (tier IN ('present', 'recent', 'old')),
    rows         bigint NOT NULL DEFAULT 0,
    late_rows    bigint NOT NULL DEFAULT 0,
    indexes      text[] NOT NULL DEFAULT '{}',
    materialized text[] NOT NULL DEFAULT '{}',
    dropped      boolean NOT NULL DEFAULT false,
    pruned       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (stream, chunk_id)
);
CREATE TABLE IF NOT EXISTS moirae_batches (
    stream       text NOT NULL,
    batch_id     bigint NOT NULL,
    rows         bigint NOT NULL,
    dead_letters bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, batch_id)
);
CREATE TABLE IF NOT EXISTS moirae_dead_letters (
    id        bigserial PRIMARY KEY,
    stream    text NOT NULL,
    batch_id  bigint,
    row_data  jsonb NOT NULL,
    reason    text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS moirae_archive_state (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);
"""

PARTS_DDL = """
CREATE TABLE IF NOT EXISTS moirae_batch_parts (
    stream       text NOT NULL,
    batch_id     bigint NOT NULL,
    part         integer NOT NULL,
    rows         bigint NOT NULL,
    dead_letters bigint NOT NULL,
    chunks       jsonb NOT NULL,
    max_us       bigint,
    PRIMARY KEY (stream, batch_id, part)
);
"""

V2_DDL = """
-- a batch part is written in pieces of a bounded number of chunks, each its own transaction
ALTER TABLE moirae_batch_parts ADD COLUMN IF NOT EXISTS piece integer NOT NULL DEFAULT 0;
ALTER TABLE moirae_batch_parts DROP CONSTRAINT IF EXISTS moirae_batch_parts_pkey;
ALTER TABLE moirae_batch_parts ADD CONSTRAINT moirae_batch_parts_pkey PRIMARY KEY (stream, batch_id, part, piece);
-- a stream's chunk interval while it may still be revised (archive.chunks): 'guess' (no
-- rate seen yet) or 'estimate' (from the rows seen so far); NULL: fixed for good
ALTER TABLE moirae_streams ADD COLUMN IF NOT EXISTS chunk_provisional text
    CHECK (chunk_provisional IN ('guess', 'estimate'));
"""
"""Version 2: batch pieces (``moirae_batch_parts.piece``) and provisional intervals
(``moirae_streams.chunk_provisional``). Idempotent; data kept."""

SIMINDEX_DDL = """
CREATE TABLE IF NOT EXISTS moirae_simindex (
    operator  text NOT NULL,
    chunk_id  bigint NOT NULL,
    streams   text[] NOT NULL,
    contexts  bigint NOT NULL,
    blob      bytea NOT NULL,
    built_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operator, chunk_id)
);
-- blobs are already dense arrays: storing them uncompressed saves a slow pglz pass per write
ALTER TABLE moirae_simindex ALTER COLUMN blob SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS moirae_simvocab (
    operator  text NOT NULL,
    col       int NOT NULL,
    term      text NOT NULL,
    PRIMARY KEY (operator, col)
);
"""

REFERENCE_DDL = """
CREATE TABLE IF NOT EXISTS moirae_reference_tables (
    name        text PRIMARY KEY,
    key         jsonb NOT NULL,
    columns     jsonb NOT NULL,
    version     integer NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS moirae_reference_versions (
    name        text NOT NULL REFERENCES moirae_reference_tables (name),
    version     integer NOT NULL,
    valid_from  timestamptz NOT NULL,
    loaded_at   timestamptz NOT NULL DEFAULT now(),
    source      text,
    rows        bigint NOT NULL,
    inserted    bigint NOT NULL,
    changed     bigint NOT NULL,
    removed     bigint NOT NULL,
    PRIMARY KEY (name, version)
);
"""
"""The registry of reference tables and their loads (:mod:`archive.reference`), created on first use."""


def reference_table_ddl(table: str, columns: list[tuple[str, str]], key: list[str]) -> str:
    """A reference table's versioned rows: each row is valid on ``[_valid_from, _valid_to)``
    (``_valid_to`` NULL while current), loaded by version ``_version``.

    >>> ddl = reference_table_ddl("moirae_ref_s", [("sid", "text"), ("team", "text")], ["sid"])
    >>> ddl.split("; ")[0].endswith('_valid_to timestamptz, "sid" text, "team" text)')
    True
    """
    cols = ", ".join(f"{quote(c)} {t}" for c, t in columns)
    keys = ", ".join(quote(c) for c in key)
    return (f"CREATE TABLE IF NOT EXISTS {quote(table)} (_version integer NOT NULL, _valid_from timestamptz NOT NULL, "
            f"_valid_to timestamptz, {cols}); "
            f"CREATE INDEX IF NOT EXISTS {quote(table + '__key')} ON {quote(table)} ({keys}, _valid_from)")


OUTAGES_DDL = ("CREATE TABLE IF NOT EXISTS moirae_outages (id bigserial PRIMARY KEY, start_ts timestamptz NOT NULL, "
               "end_ts timestamptz NOT NULL, retries int NOT NULL, during text, last_error text)")

MIGRATIONS: dict[int, str] = {
    # 0: a database written before the version was stored. Its tables lack at most the
    # columns and tables added since, which the current DDL adds without touching data.
    0: CATALOG_DDL + PARTS_DDL,
    1: V2_DDL,
}
"""``{from_version: the SQL that brings it to from_version + 1}``."""


def stream_table_ddl(name: str, ts_col: str, columns: list[tuple[str, str]]) -> str:
    """The partitioned table of a stream: source id, batch id, event time, payload.

    >>> ddl = stream_table_ddl("m", "ts", [("v", "bigint")])
    >>> ddl.startswith('CREATE TABLE IF NOT EXISTS "m" (_sid bigint NOT NULL, _batch bigint NOT NULL, "ts" timestamptz')
    True
    >>> ddl.endswith(' NOT NULL, "v" bigint) PARTITION BY RANGE ("ts")')
    True
    """
    cols = ", ".join(f"{quote(c)} {t}" for c, t in columns)
    return (f"CREATE TABLE IF NOT EXISTS {quote(name)} (_sid bigint NOT NULL, "
            f"_batch bigint NOT NULL, {quote(ts_col)} timestamptz NOT NULL"
            f"{', ' + cols if cols else ''}) PARTITION BY RANGE ({quote(ts_col)})")


def partition_ddl(cur, stream: str, part: str, start: datetime, end: datetime, no_vacuum: bool) -> list[str]:
    """The statements creating chunk table ``part`` of ``stream`` for ``[start, end)``:
    a table like the stream's, then attached to it as a partition.

    Not ``CREATE TABLE .. PARTITION OF``, which takes the stream's table in ACCESS
    EXCLUSIVE mode and so waits for every open transaction that reads or writes any of
    its chunks: each executor's COPY, a history-query (up to its statement timeout).
    ``ATTACH PARTITION`` takes SHARE UPDATE EXCLUSIVE, which those transactions' locks
    leave alone (PostgreSQL 12 and later), and the new table is empty, so the partition
    bound is checked at once. PostgreSQL gives the new partition each index of the
    stream's table, as for ``PARTITION OF``."""
    with_ = " WITH (autovacuum_enabled = off)" if no_vacuum else ""
    return [f"CREATE TABLE {quote(part)} (LIKE {quote(stream)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            f"INCLUDING STORAGE){with_};",
            cur.mogrify(f"ALTER TABLE {quote(stream)} ATTACH PARTITION {quote(part)} FOR VALUES FROM (%s) TO (%s);",
                        (start, end)).decode()]


def stage_table_ddl(stream: str, columns: list[str]) -> str:
    """The stage table of a shared read: the stream's ``columns``, no partitions, no rows.

    >>> stage_table_ddl("m", ["_sid", "ts"])
    'CREATE TABLE IF NOT EXISTS "m__stage" AS SELECT "_sid", "ts" FROM "m" WITH NO DATA'
    """
    cols = ", ".join(quote(c) for c in columns)
    return f"CREATE TABLE IF NOT EXISTS {quote(stage_name(stream))} AS SELECT {cols} FROM {quote(stream)} WITH NO DATA"


def table_exists(cur, *tables: str) -> bool:
    """Whether every one of ``tables`` exists, looked up as SQL would resolve each name
    (so a name that needs quoting is passed quoted), inside the caller's transaction.

    A reader of an optional table (one created on first use) asks this before reading it,
    so that a database where the feature never ran reads as empty rather than failing."""
    cur.execute("SELECT bool_and(to_regclass(t) IS NOT NULL) FROM unnest(%s::text[]) t", (list(tables),))
    return bool(cur.fetchone()[0])


def stored_version(cur) -> int | None:
    """The version stored in the database: None for a database without the archive's
    tables, 0 for one written before the version was stored."""
    cur.execute("SELECT to_regclass('moirae_streams') IS NOT NULL, to_regclass('moirae_archive_state') IS NOT NULL")
    streams, state = cur.fetchone()
    if not streams and not state:
        return None
    if not state:
        return 0
    cur.execute("SELECT value FROM moirae_archive_state WHERE key = %s", (VERSION_KEY,))
    row = cur.fetchone()
    return 0 if row is None else int(row[0])


def open_schema(cur, where: str = "this database") -> int | None:
    """Inside the caller's transaction: create the archive's tables in a fresh database,
    or migrate an older one to :data:`SCHEMA_VERSION`; return the version found (None
    for a fresh database). ``where`` names the database in errors.

    Raises :class:`~archive.errors.SchemaVersionError` for a version this code cannot
    open: newer than :data:`SCHEMA_VERSION`, or older with no migration step."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))  # one DDL writer at a time
    found = stored_version(cur)
    if found is None:
        cur.execute(CATALOG_DDL + PARTS_DDL + V2_DDL)
    elif found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the archive in {where} is at schema version {found}, newer than this Moirae's {SCHEMA_VERSION}: "
            "run the Moirae release that wrote it, or point the archive at another database or schema")
    else:
        for version in range(found, SCHEMA_VERSION):
            if version not in MIGRATIONS:
                raise SchemaVersionError(
                    f"the archive in {where} is at schema version {found}, and no migration leads from "
                    f"version {version} to {SCHEMA_VERSION}: archive it again into a fresh database or schema")
            cur.execute(MIGRATIONS[version])
    if found != SCHEMA_VERSION:
        cur.execute("INSERT INTO moirae_archive_state (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (VERSION_KEY, json.dumps(SCHEMA_VERSION)))
    return found
