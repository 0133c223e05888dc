"""The stream registry and chunk catalog of one archive, in memory and in PostgreSQL.

A :class:`Catalog` is the narrow object the archive's modules share: the
:class:`~archive.pg.Database`, the :class:`~archive.settings.ArchiveSettings`, each
stream's spec, chunk interval, expiry horizon and cluster keys, and the catalog reads.
Chunk layout (:mod:`archive.chunks`), tiers (:mod:`archive.tiers`) and the write path
(:mod:`archive.writes`) receive it instead of the :class:`~archive.archiver.Archiver`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from archive.abc import ChunkGrid, ChunkInfo, Tier
from archive.errors import SchemaConflict, UnknownStream
from archive.names import quote
from archive.pg import Database
from archive.schema import DDL_LOCK, open_schema, stream_table_ddl, table_exists
from archive.settings import ArchiveSettings
from archive.streams import RetentionPolicy, StreamSpec
from archive.types import ColumnType


class Catalog:
    """The registry of one archive. Thread-safe. Opening it checks the schema version
    (:func:`archive.schema.open_schema`) and loads the registry."""

    def __init__(self, db: Database, settings: ArchiveSettings) -> None:
        self.db = db
        self.settings = settings
        self.grid = ChunkGrid(settings.chunk_span)
        self.lock = threading.RLock()
        self._streams: dict[str, StreamSpec] = {}
        self._horizons: dict[str, datetime] = {}
        self._intervals: dict[str, timedelta] = {}
        self._provisional: dict[str, str] = {}
        self._cluster: dict[str, tuple[str, ...]] = {}
        #: per stream, the archived rows when its provisional estimate was last checked
        #: against them (archive.chunks.settle)
        self.estimated_at: dict[str, int] = {}
        with self.transaction() as conn, conn.cursor() as cur:
            open_schema(cur, f"schema {db.schema!r}" if db.schema else "the database's public schema")
        self._load()

    @contextmanager
    def transaction(self) -> Iterator:
        """A pooled connection inside one transaction, committed on success
        (:meth:`archive.pg.Database.connection`)."""
        with self.db.connection(autocommit=False) as conn:
            yield conn

    def _load(self) -> None:
        with self.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, ts_col, columns, kind, indexes, retention FROM moirae_streams")
            for name, ts_col, cols, kind, idx, ret in cur.fetchall():
                self._streams[name] = StreamSpec.build(
                    name, ts_col, {c: t for c, t in cols}, kind, [tuple(i) for i in idx],
                    RetentionPolicy.from_json(ret))
            cur.execute("SELECT key, value FROM moirae_archive_state WHERE key LIKE 'horizon:%%'")
            for key, value in cur.fetchall():
                self._horizons[key.split(":", 1)[1]] = datetime.fromisoformat(value)
            # streams archived before intervals were per stream used chunk_span
            cur.execute("UPDATE moirae_streams s SET chunk_us = %s WHERE chunk_us IS NULL AND EXISTS "
                        "(SELECT 1 FROM moirae_chunks c WHERE c.stream = s.stream)", (self.grid.span_us,))
            cur.execute("SELECT stream, chunk_us, chunk_provisional FROM moirae_streams WHERE chunk_us IS NOT NULL")
            for name, us, provisional in cur.fetchall():
                self.remember_interval(name, timedelta(microseconds=us), provisional)

    # -- streams -----------------------------------------------------------------------

    def register(self, spec: StreamSpec) -> StreamSpec:
        """Create the stream's partitioned table and record it (idempotent for the same
        columns; new indexes, retention or kind replace the old). Raises
        :class:`~archive.errors.SchemaConflict` for other columns."""
        with self.lock:
            old = self._streams.get(spec.name)
            if old is not None:
                if (old.ts_col, old.columns) != (spec.ts_col, spec.columns):
                    raise SchemaConflict(
                        f"stream {spec.name!r} is archived with columns {_describe(old)}; "
                        f"cannot re-register it with {_describe(spec)}")
                if (old.indexes, old.retention, old.kind) != (spec.indexes, spec.retention, spec.kind):
                    self._save(spec)
                    self._streams[spec.name] = spec
                return self._streams[spec.name]
            ddl = stream_table_ddl(spec.name, spec.ts_col, [(c, t.value) for c, t in spec.columns.items()])
            with self.transaction() as conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
                cur.execute(ddl)
            self._save(spec)
            self._streams[spec.name] = spec
            return spec

    def _save(self, spec: StreamSpec) -> None:
        with self.transaction() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO moirae_streams (stream, ts_col, columns, kind, indexes, retention) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (stream) DO UPDATE SET "
                "kind = EXCLUDED.kind, indexes = EXCLUDED.indexes, retention = EXCLUDED.retention",
                (spec.name, spec.ts_col, json.dumps([[c, t.value] for c, t in spec.columns.items()]),
                 spec.kind, json.dumps([list(i) for i in spec.indexes]), json.dumps(spec.retention.to_json())))

    def stream(self, name: str) -> StreamSpec:
        """The registered stream ``name``; :class:`~archive.errors.UnknownStream` otherwise."""
        try:
            return self._streams[name]
        except KeyError:
            known = ", ".join(sorted(self._streams)) or "none"
            raise UnknownStream(f"unknown stream {name!r} (archived streams: {known})") from None

    def streams(self) -> list[StreamSpec]:
        return list(self._streams.values())

    def forget(self, name: str) -> None:
        """Forget stream ``name`` in memory, after its tables were dropped (:mod:`archive.drop`)."""
        with self.lock:
            for held in (self._streams, self._horizons, self._intervals, self._cluster):
                held.pop(name, None)

    def names(self) -> set[str]:
        return set(self._streams)

    # -- intervals, horizons, cluster keys ----------------------------------------------

    def interval(self, stream: str) -> timedelta | None:
        """The stream's recorded chunk interval (final or provisional), or None while none is."""
        return self._intervals.get(stream)

    def provisional(self, stream: str) -> str | None:
        """``"guess"`` or ``"estimate"`` while the stream's recorded interval may still be
        revised (:func:`archive.chunks.settle`); None once it is final (or none is recorded)."""
        return self._provisional.get(stream)

    def remember_interval(self, stream: str, span: timedelta, provisional: str | None = None) -> None:
        """Note ``span`` as the stream's interval (recorded in ``moirae_streams`` already),
        and whether it is provisional."""
        with self.lock:
            self._intervals[stream] = span
            if provisional is None:
                self._provisional.pop(stream, None)
            else:
                self._provisional[stream] = provisional

    def grid_of(self, stream: str) -> ChunkGrid:
        """The stream's own chunk grid now: its recorded interval, else its configured one,
        else ``chunk_span`` (until its first batch records one). A provisional interval may
        still change while the stream is young (:func:`archive.chunks.settle`)."""
        span = self._intervals.get(stream) or self.settings.chunk_intervals.get(stream)
        return ChunkGrid(span) if span else self.grid

    def horizon(self, stream: str) -> datetime | None:
        """The stream's expiry horizon as last advanced (:meth:`advance_horizon`)."""
        return self._horizons.get(stream)

    def advance_horizon(self, stream: str, horizon: datetime) -> datetime:
        """Move the stream's horizon forward to ``horizon`` (recorded; never backward);
        returns the horizon now in force."""
        prev = self._horizons.get(stream)
        if prev is not None and horizon <= prev:
            return prev
        with self.transaction() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_archive_state (key, value) VALUES (%s, %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        (f"horizon:{stream}", json.dumps(horizon.isoformat())))
        self._horizons[stream] = horizon
        return horizon

    def cluster_by(self, stream: str, keys: tuple[str, ...]) -> tuple[str, ...]:
        """Ask for the stream's rows to be written sorted by ``keys`` within each chunk of
        a micro-batch partition; the first keys asked for in this process win. Returns
        the stream's cluster keys."""
        with self.lock:
            return self._cluster.setdefault(stream, tuple(keys)) if keys else self.cluster_keys(stream)

    def cluster_keys(self, stream: str) -> tuple[str, ...]:
        """The columns the stream's rows are written sorted by, or ()."""
        return self._cluster.get(stream, ())

    # -- catalog reads -----------------------------------------------------------------

    def chunks(self, stream: str | None = None, tier: Tier | None = None,
               include_dropped: bool = False) -> list[ChunkInfo]:
        """Catalog rows, newest chunk first (then by stream); dropped chunks only if asked."""
        where, args = ["true"], []
        if stream is not None:
            self.stream(stream)
            where.append("stream = %s")
            args.append(stream)
        if tier is not None:
            where.append("tier = %s")
            args.append(Tier(tier).value)
        if not include_dropped:
            where.append("NOT dropped")
        with self.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, chunk_id, start_ts, end_ts, tier, rows, late_rows, indexes, materialized "
                        f"FROM moirae_chunks WHERE {' AND '.join(where)} ORDER BY chunk_id DESC, stream", args)
            return [ChunkInfo(s, c, st, en, Tier(t), r, lr, None, tuple(ix), tuple(m))
                    for s, c, st, en, t, r, lr, ix, m in cur.fetchall()]

    def tier(self, stream: str, chunk_id: int) -> Tier | None:
        """The chunk's tier, or None for a chunk not in the catalog (or dropped)."""
        with self.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT tier FROM moirae_chunks WHERE stream = %s AND chunk_id = %s AND NOT dropped",
                        (stream, chunk_id))
            row = cur.fetchone()
        return Tier(row[0]) if row else None


def has_partition(cur, table: str) -> bool:
    """Whether chunk table ``table`` exists (inside the caller's transaction)."""
    return table_exists(cur, quote(table))


def _describe(spec: StreamSpec) -> str:
    return "{" + ", ".join(f"{c}: {t.value}" for c, t in [(spec.ts_col, ColumnType.TIMESTAMPTZ),
                                                          *spec.columns.items()]) + "}"
