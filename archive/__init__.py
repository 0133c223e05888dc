"""The archive (M 4.1): chunked, tiered PostgreSQL storage of every stream Moirae sees.

The public surface:

- the chunk-store contract and its value types (:mod:`archive.abc`): :class:`ChunkStore`,
  :class:`ChunkGrid`, :class:`ChunkInfo`, :class:`Tier`, :class:`HistoryQuery`,
  :class:`AppendResult`;
- its PostgreSQL implementation, :class:`Archiver`, over a :class:`Database`, with
  :class:`ArchiveSettings`, streams described by :class:`StreamSpec` and
  :class:`RetentionPolicy`;
- every error (:mod:`archive.errors`), rooted at :class:`ArchiveError`.

The Spark side (:mod:`archive.spark_sink`, :mod:`archive.exec_udf`, :mod:`archive.shared`)
is imported on its own; importing this package does not import ``pyspark``.
"""

from archive.abc import AppendResult, ChunkGrid, ChunkInfo, ChunkStore, HistoryQuery, Tier
from archive.archiver import Archiver
from archive.errors import (
    ArchiveError,
    BadName,
    BatchTooWide,
    ChunkNotFound,
    DatabaseUnavailable,
    HistoryQueryCancelled,
    HistoryQueryFailed,
    HistoryQueryTimeout,
    MaterializationError,
    MissingParameter,
    SchemaConflict,
    SchemaVersionError,
    UnknownStream,
    UnsafeQuery,
    UnsupportedType,
)
from archive.pg import Database
from archive.schema import SCHEMA_VERSION
from archive.settings import ArchiveSettings
from archive.streams import Retention, RetentionPolicy, StreamSpec
from archive.tiers import Contributing, Transition

__all__ = [
    "SCHEMA_VERSION", "AppendResult", "ArchiveError", "ArchiveSettings", "Archiver", "BadName", "BatchTooWide",
    "ChunkGrid", "ChunkInfo", "ChunkNotFound", "ChunkStore", "Contributing", "Database", "DatabaseUnavailable",
    "HistoryQuery", "HistoryQueryCancelled", "HistoryQueryFailed", "HistoryQueryTimeout", "MaterializationError",
    "MissingParameter", "Retention", "RetentionPolicy", "SchemaConflict", "SchemaVersionError", "StreamSpec",
    "Tier", "Transition", "UnknownStream", "UnsafeQuery", "UnsupportedType",
]
