"""The archive's schema version (archive.schema): stored on first open, checked on every
open; an older database is migrated, a newer or unknown one refused in one line."""

from __future__ import annotations

import json

import pytest

from archive import SCHEMA_VERSION, ArchiveError, SchemaVersionError
from archive.schema import MIGRATIONS, VERSION_KEY
from tests.archive.arch_helpers import make_archiver, metrics_spec, rows

pytestmark = pytest.mark.postgres


def _stored(db) -> int | None:
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT value FROM moirae_archive_state WHERE key = %s", (VERSION_KEY,))
        row = cur.fetchone()
    return None if row is None else int(row[0])


def _stamp(db, version: int | None) -> None:
    with db.connection() as conn, conn.cursor() as cur:
        if version is None:
            cur.execute("DELETE FROM moirae_archive_state WHERE key = %s", (VERSION_KEY,))
        else:
            cur.execute("UPDATE moirae_archive_state SET value = %s WHERE key = %s", (json.dumps(version), VERSION_KEY))


def test_a_fresh_database_gets_the_current_version_and_reopens(pg):
    first = make_archiver(pg)
    first.register_stream(metrics_spec())
    first.append("metrics", 1, rows(5))
    assert _stored(pg) == SCHEMA_VERSION
    again = make_archiver(pg)  # the same version: opened as it is
    assert again.batch_ids("metrics") == [1] and _stored(pg) == SCHEMA_VERSION
    first.index_claims.close()
    again.index_claims.close()


def test_a_database_from_before_the_version_is_migrated(pg):
    """A database written before the version was stored (no version row, a column added
    since missing) is brought to the current version, its data kept."""
    old = make_archiver(pg)
    old.register_stream(metrics_spec())
    old.append("metrics", 1, rows(5))
    _stamp(pg, None)
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE moirae_streams DROP COLUMN chunks_version")
    assert 0 in MIGRATIONS
    new = make_archiver(pg)
    assert _stored(pg) == SCHEMA_VERSION
    assert new.batch_ids("metrics") == [1] and sum(c.rows for c in new.chunks("metrics")) == 5
    assert new.chunk_ids(["metrics"])  # the migrated catalog serves task ids (chunks_version is back)
    old.index_claims.close()
    new.index_claims.close()


def test_a_newer_version_is_refused_in_one_line_saying_what_to_do(pg):
    make_archiver(pg).index_claims.close()
    _stamp(pg, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError) as err:
        make_archiver(pg)
    msg = str(err.value)
    assert "\n" not in msg and f"schema version {SCHEMA_VERSION + 1}" in msg and pg.schema in msg
    assert "point the archive at another database or schema" in msg
    assert isinstance(err.value, ArchiveError)
    assert _stored(pg) == SCHEMA_VERSION + 1  # left as it was


def test_an_older_version_without_a_migration_is_refused(pg, monkeypatch):
    from archive import schema

    make_archiver(pg).index_claims.close()
    _stamp(pg, 0)
    monkeypatch.setattr(schema, "MIGRATIONS", {})
    with pytest.raises(SchemaVersionError, match=r"schema version 0, and no migration leads from version 0"):
        make_archiver(pg)
    assert _stored(pg) == 0


def test_a_version_1_database_gains_batch_pieces_and_provisional_intervals(pg, monkeypatch):
    """Version 1 had one record per executor partition and intervals fixed by the first
    batch; opening it migrates the tables in place, and a batch in pieces then works."""
    from datetime import timedelta

    from archive import chunks

    old = make_archiver(pg)
    old.register_stream(metrics_spec())
    old.append("metrics", 1, rows(5))
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE moirae_batch_parts DROP CONSTRAINT moirae_batch_parts_pkey")
        cur.execute("ALTER TABLE moirae_batch_parts DROP COLUMN piece")
        cur.execute("ALTER TABLE moirae_batch_parts ADD PRIMARY KEY (stream, batch_id, part)")
        cur.execute("ALTER TABLE moirae_streams DROP COLUMN chunk_provisional")
    _stamp(pg, 1)
    new = make_archiver(pg)
    assert _stored(pg) == SCHEMA_VERSION == 2
    monkeypatch.setattr(chunks, "MAX_CHUNKS_PER_BATCH", 4)
    assert new.append("metrics", 2, rows(10, start=rows(1)["ts"][0] + timedelta(days=2),
                                         step=timedelta(hours=1), first=5)).rows == 10
    assert new.batch_ids("metrics") == [1, 2] and sum(c.rows for c in new.chunks("metrics")) == 15
    assert new.catalog.provisional("metrics") is None  # an interval recorded before stays final
    old.index_claims.close()
    new.index_claims.close()
