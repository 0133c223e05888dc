"""The engine's source streams and the streaming queries that archive them.

Each registered source is archived exactly once: by its own archive query (Spark
checkpoints under the data directory plus the Archiver's batch log), or, with
``archive.shared_read``, by the read of the first event-query deployed on it
(:mod:`archive.shared`). The registry reports every committed archive batch to the
:class:`~moirae.ingest.archive_waits.ArchiveWaits`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from archive import Archiver, RetentionPolicy
from archive.shared import MARKER, SharedArchive, claim, record_claim, recorded_owner
from archive.spark_sink import archive_batches, archive_layout, prepare_batch, spec_from_spark_schema
from moirae.config import Settings
from moirae.ingest.archive_waits import ArchiveWaits
from moirae.runtime.checkpoint_identity import verify as verify_checkpoint
from moirae.runtime.errors import EngineError
from moirae.runtime.graceful_stop import stop_between_batches
from moirae.runtime.supervise import LiveQuery


@dataclass
class Source:
    """One registered source stream and the query archiving it."""

    name: str
    df: Any
    ts: str
    lateness: str
    payload: list[str]
    archived: Any = None  # the DataFrame the archive query writes (archive_layout: no per-batch projection)
    query: Any = None
    last_watermark: datetime | None = None
    layout: Any = None  # archive_layout without the watermark (a shared read's plan starts from it)
    shared_by: str | None = None  # the event-query whose read archives this source (archive.shared)
    reader: Any = None  # that event-query's live flow (its ``streaming`` query and ``started`` time)
    sparse: bool = False  # never lags the other inputs: an idle trigger means caught up (moirae.runtime.idle)
    started: float = float("inf")  # wall time its archive query started
    shared_read: bool | None = None  # False: never archived by an event-query's read (archive.shared)


class SharedReader(Protocol):
    """An event-query's live flow that archives the sources its read shares."""

    streaming: Any
    started: float
    stopped: bool  # its query was stopped for good (until started again): it archives no more


class SourceRegistry:
    """The registered sources, their archive queries, and how far they are archived."""

    def __init__(self, archiver: Archiver, settings: Settings, data_dir: Path) -> None:
        self.archiver = archiver
        self.settings = settings
        self.data_dir = data_dir
        self.by_name: dict[str, Source] = {}
        self.started = False
        #: False while a monitor is deployed: a monitor's sources keep their own archive
        #: queries, so undeploying one monitor never stops another's archive
        self.sharing = True
        self.waits = ArchiveWaits(self, lambda: self.settings.spark.trigger.total_seconds())

    def __iter__(self) -> Iterator[Source]:
        return iter(list(self.by_name.values()))

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> Source | None:
        return self.by_name.get(name)

    def checkpoint_dir(self, name: str) -> Path:
        """Where the streaming query of ``name`` keeps its checkpoint: per database schema
        and scenario, since a checkpoint only resumes the source it was written for."""
        s = self.settings
        return self.data_dir / "checkpoints" / s.postgres.schema / s.scenario / name

    def register(self, name: str, df, ts: str, lateness: str, indexes=(), retention: RetentionPolicy | None = None,
                 sparse: bool = False, shared_read: bool | None = None):
        """See :meth:`moirae.engine.engine.Engine.source`."""
        if name in self.by_name:
            raise EngineError(f"source {name!r} is already registered")
        if not df.isStreaming:
            raise EngineError(f"source {name!r} must be a streaming DataFrame (spark.readStream...)")
        spec = spec_from_spark_schema(name, df.schema, ts, indexes=indexes, retention=retention)
        spec = self.archiver.register_stream(spec)
        # Cast to the archive's types first, so Ananke's source ids (hashed over these
        # columns in the live query) equal the ids the Archiver stores.
        typed = prepare_batch(df, spec).drop("_sid")
        watermarked = typed.withWatermark(ts, lateness)
        layout = archive_layout(df, spec)
        self.by_name[name] = Source(name, watermarked, ts, lateness, list(spec.columns),
                                    layout.withWatermark(ts, lateness), layout=layout, sparse=sparse,
                                    shared_read=shared_read)
        if self.started:
            self.start(self.by_name[name])
        return watermarked

    def shared_input(self, name: str, owner: str, reader: SharedReader | None = None):
        """The source ``name`` read through its archive's partition writers, for event-query
        ``owner`` (whose live flow is ``reader``) to build on, with the
        :class:`archive.shared.SharedArchive` that owner's batches drive; None when the
        source keeps its own archive query (``archive.shared_read`` off, or the source
        registered with ``shared_read=False``; the engine already started, another
        event-query claimed it first, or its checkpoint says it was archived otherwise
        before). The first event-query deployed on a source claims it;
        one deployed after it reads the source a second time. See :mod:`archive.shared`."""
        src = self.by_name[name]
        wanted = self.settings.archive.shared_read if src.shared_read is None else src.shared_read
        if (not wanted or not self.sharing or self.started or src.query is not None
                or src.shared_by is not None or claim(self.checkpoint_dir(name), owner) is not None):
            return None
        shared = SharedArchive(self.archiver, name, owner)
        df = shared.plan(src.layout).drop("_sid").select(*src.df.columns).withWatermark(src.ts, src.lateness)
        record_claim(self.checkpoint_dir(name), owner)
        src.shared_by, src.reader = owner, reader
        return df, shared

    def release_shared(self, name: str, owner: str) -> None:
        """Undo :meth:`shared_input` for an event-query that was not deployed after all."""
        src = self.by_name.get(name)
        if src is not None and src.shared_by == owner:
            src.shared_by = src.reader = None
            (self.checkpoint_dir(name) / MARKER).unlink(missing_ok=True)

    def reader_stopped(self, name: str) -> None:
        """The event-query whose read archives the shared source ``name`` was stopped:
        nothing more of it is archived, so waits on it end now instead of at their
        timeout (:meth:`live` no longer lists it)."""
        self.waits.stopped(name)

    def shared_committed(self, name: str, result, started: float | None) -> None:
        """An event-query committed its micro-batch of the shared source ``name``."""
        self.waits.archived(name, result)
        self.waits.batch_done(name, started if started is not None else time.time())

    def start(self, src: Source) -> None:
        """Start the archive query of ``src`` (none for a source a read archives)."""
        if src.shared_by is not None:  # archived by its event-query's read
            return
        other = recorded_owner(self.checkpoint_dir(src.name))
        if other is not None:
            raise EngineError(f"source {src.name!r} was archived by the read of event-query {other!r} "
                              f"({self.checkpoint_dir(src.name) / MARKER}); deploy {other!r} again with "
                              "archive.shared_read on, so the archive goes on where it stopped")
        # the batch log belongs to this checkpoint: a lost or foreign one is refused, never skipped
        verify_checkpoint(self.archiver.db, src.name, self.checkpoint_dir(src.name))
        trigger = f"{int(self.settings.spark.trigger.total_seconds() * 1000)} milliseconds"
        write = archive_batches(self.archiver, src.name,
                                on_batch=lambda res, _df, n=src.name: self.waits.archived(n, res))

        def batch(df, batch_id: int, n: str = src.name) -> None:
            started = time.time()  # wall clock: Spark's triggers are aligned to it
            write(df, batch_id)
            self.waits.batch_done(n, started)

        src.started = time.time()
        src.query = (src.archived.writeStream.queryName(f"archive_{src.name}")
                     .foreachBatch(batch)
                     .option("checkpointLocation", str(self.checkpoint_dir(src.name)))
                     .trigger(processingTime=trigger).start())

    def stop(self, grace_s: float) -> None:
        """Stop every archive query between batches; waits on their streams end (those
        streams are archived no further)."""
        for src in self.by_name.values():
            if src.query is not None:
                stop_between_batches(src.query, grace_s)
                src.query = None
                self.waits.stopped(src.name)

    def remove(self, name: str, grace_s: float) -> Source | None:
        """Stop the archive query of source ``name`` between batches and unregister it
        (its archived stream stays); None when it is not registered. A source a read
        archives (``shared_by``) is only released: its reader's flow is stopped by the
        caller."""
        src = self.by_name.pop(name, None)
        if src is None:
            return None
        self.waits.stopped(name)  # no wait on it holds an event's contexts up any longer
        if src.query is not None:
            stop_between_batches(src.query, grace_s)
            src.query = None
        src.reader = None
        return src

    # -- what the archive waits ask (moirae.ingest.archive_waits.ArchivedStreams) -----

    def live(self, streams: Iterable[str]) -> list[str]:
        """The streams among ``streams`` still being archived: by their own archive query,
        or by an event-query's read not yet stopped (one not started yet counts: its
        first batch will archive them)."""
        def live(src: Source) -> bool:
            if src.query is not None:
                return True
            return bool(src.shared_by) and not getattr(src.reader, "stopped", False)

        return [s for s in streams if s in self.by_name and live(self.by_name[s])]

    def is_sparse(self, name: str) -> bool:
        return self.by_name[name].sparse

    def archive_query(self, name: str) -> tuple[Any, float]:
        """The streaming query that archives ``name`` and the wall time it started: its own
        archive query, or the event-query whose read archives it (:mod:`archive.shared`);
        (None, inf) when neither runs."""
        src = self.by_name[name]
        if src.shared_by is None:
            return src.query, src.started
        if src.reader is None or src.reader.streaming is None:
            return None, float("inf")
        return src.reader.streaming, src.reader.started

    def watermark(self, name: str) -> datetime | None:
        """The source's current watermark from its streaming query's progress (the last
        one seen, once the query has stopped)."""
        src = self.by_name.get(name)
        if src is None:
            return None
        query = self.archive_query(name)[0]  # a shared source: the event-query's watermark
        if query is not None and query.lastProgress is not None:
            wm = (query.lastProgress.get("eventTime") or {}).get("watermark")
            if wm:
                ts = datetime.fromisoformat(wm.replace("Z", "+00:00"))
                if ts.year > 1970 and (src.last_watermark is None or ts > src.last_watermark):
                    src.last_watermark = ts
        return src.last_watermark

    def live_queries(self) -> list[LiveQuery]:
        """The archive queries now, for the supervisor."""
        return [LiveQuery(f"archive_{src.name}", src.query, self.checkpoint_dir(src.name),
                          lambda src=src: self.start(src)) for src in self.by_name.values() if src.shared_by is None]
