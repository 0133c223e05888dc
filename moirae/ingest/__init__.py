"""The live path: a deployed event-query running on its streams, its events logged and
handed to the recall workers.

- :mod:`~moirae.ingest.sources`: :class:`SourceRegistry`, the source streams and the queries archiving
  them; :mod:`~moirae.ingest.archive_waits`: how far each is archived, and waiting for it.
- :mod:`~moirae.ingest.live`: :class:`EventFlow`, one event-query running live.
- :mod:`~moirae.ingest.window_provenance`: resolving window digests from the archive (A 5.1).
- :mod:`~moirae.ingest.event_worker`: new events leave the micro-batch for a worker thread.
- :mod:`~moirae.ingest.events`: :class:`EventLog`, the durable record of every event.
- :mod:`~moirae.ingest.persist`: similarity statistics kept in PostgreSQL across restarts (M 3.5).
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "SourceRegistry": "moirae.ingest.sources",
    "ArchiveWaits": "moirae.ingest.archive_waits",
    "EventFlow": "moirae.ingest.live",
    "ArchiveResolver": "moirae.ingest.window_provenance",
    "EventWorker": "moirae.ingest.event_worker",
    "EventLog": "moirae.ingest.events",
    "EventRecord": "moirae.ingest.events",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
