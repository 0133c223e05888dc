"""DDL of the Archiver's own tables: the stream registry, the chunk catalog, the batch
log (exactly-once appends) and the dead-letter table."""

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
