"""The Archiver (M 4.1): chunked, tiered PostgreSQL storage of every stream Moirae sees."""

from archive.abc import (
    AppendResult,
    ArchiveError,
    ChunkGrid,
    ChunkInfo,
    ChunkNotFound,
    ChunkStore,
    HistoryQuery,
    HistoryQueryCancelled,
    HistoryQueryTimeout,
    MissingParameter,
    Tier,
    UnknownStream,
    UnsafeQuery,
)
from archive.archiver import Archiver, SchemaConflict
from archive.history import HistoryQueryFailed
from archive.pg import Database, DatabaseUnavailable
from archive.settings import ArchiveSettings
from archive.streams import Retention, RetentionPolicy, StreamSpec
from archive.tiers import Contributing, Transition

__all__ = [
    "AppendResult", "ArchiveError", "ArchiveSettings", "Archiver", "ChunkGrid", "ChunkInfo", "ChunkNotFound",
    "ChunkStore", "Contributing", "Database", "DatabaseUnavailable", "HistoryQuery", "HistoryQueryCancelled",
    "HistoryQueryFailed", "HistoryQueryTimeout", "MissingParameter", "Retention", "RetentionPolicy",
    "SchemaConflict", "StreamSpec", "Tier", "Transition", "UnknownStream", "UnsafeQuery",
]
