"""Every error the archive raises. :class:`ArchiveError` is the package's root.

Each class also inherits the built-in that matches its meaning, so callers may catch
``LookupError``, ``ValueError`` or ``TimeoutError`` as they would for the standard
library, or :class:`ArchiveError` (or :class:`moirae.base.errors.MoiraeError`) for
anything the archive refused.
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class ArchiveError(MoiraeError):
    """Root of the archive's errors."""


class UnknownStream(ArchiveError, LookupError):
    """A stream name that was never registered."""


class ChunkNotFound(ArchiveError, LookupError):
    """A chunk id that holds no data for the stream(s) asked about."""


class UnsafeQuery(ArchiveError, ValueError):
    """A history-query template that is not one read-only SELECT over known streams."""


class MissingParameter(ArchiveError, KeyError):
    """A template placeholder with no bound value."""


class HistoryQueryTimeout(ArchiveError, TimeoutError):
    """A history-query ran past its statement timeout."""


class HistoryQueryCancelled(ArchiveError):
    """A history-query was cancelled (its event was cancelled)."""


class HistoryQueryFailed(ArchiveError, RuntimeError):
    """PostgreSQL refused or failed a history-query; the message carries its error."""


class SchemaConflict(ArchiveError, ValueError):
    """A stream re-registered with a different schema or chunk interval."""


class SchemaVersionError(ArchiveError, RuntimeError):
    """The archive's tables in the database are at a schema version this code cannot
    open (newer, unknown, or older without a migration); the message says what to do."""


class BatchTooWide(ArchiveError, ValueError):
    """A write that must be one transaction spanning more chunks than one transaction may
    lock. The archive's write paths no longer raise it: they write such a batch in pieces
    (:func:`archive.chunks.pieces`); kept so callers catching it still import."""


class MaterializationError(ArchiveError, ValueError):
    """Replica output that does not fit its stream or its chunk."""


class BadName(ArchiveError, ValueError):
    """A stream or column name that cannot be a SQL identifier here."""


class UnsupportedType(ArchiveError, TypeError):
    """A column type the archive cannot store."""


class DatabaseUnavailable(ArchiveError, ConnectionError):
    """The configured PostgreSQL cannot be reached or started."""


class ReferenceTableError(ArchiveError, ValueError):
    """A reference table that cannot be loaded or read as asked (its name, key, columns or rows)."""


__all__ = [
    "ArchiveError", "BadName", "BatchTooWide", "ChunkNotFound", "DatabaseUnavailable", "HistoryQueryCancelled",
    "HistoryQueryFailed", "HistoryQueryTimeout", "MaterializationError", "MissingParameter", "SchemaConflict",
    "SchemaVersionError", "UnknownStream", "UnsafeQuery", "UnsupportedType", "ReferenceTableError",
]
