"""The project's one root exception.

Every error Moirae raises on purpose derives from :class:`MoiraeError`. Each package's
own root error (``scheduler.errors.SchedulerError``, ``archive.errors.ArchiveError``,
...) derives from it, and ``moirae.errors`` re-exports every public error.

Subclasses also inherit the matching built-in, so callers may catch either:

>>> class ChunkNotFound(MoiraeError, LookupError): ...
>>> issubclass(ChunkNotFound, LookupError)
True
"""

from __future__ import annotations


class MoiraeError(Exception):
    """Root of every error Moirae raises on purpose. The message names the culprit."""
