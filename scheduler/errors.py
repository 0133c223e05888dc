"""The project's one root exception.

Every Moirae error derives from :class:`MoiraeError`. It lives here, in the only
stdlib-only package, because the import table of DESIGN.md §2 lets no lower package
import ``moirae``: ``archive``, ``similarity``, ``ananke`` and ``recall`` may import this
one module of ``scheduler`` for it, and ``moirae`` re-exports it.

Subclasses also inherit the matching built-in, so callers may catch either:

>>> class ChunkNotFound(MoiraeError, LookupError): ...
>>> issubclass(ChunkNotFound, LookupError)
True
"""

from __future__ import annotations


class MoiraeError(Exception):
    """Root of every error Moirae raises on purpose. The message names the culprit."""


class SchedulerError(MoiraeError):
    """A scheduling request that cannot be honoured."""


class UnknownTask(SchedulerError, LookupError):
    """A task id (or event id) the scheduler does not hold."""
