"""Errors raised by the stream sources.

Each one is a :class:`MoiraeError` and also the matching built-in, so a caller may catch
either. Messages name the file, the column, the key or the value at fault.

>>> issubclass(SourceFileNotFound, FileNotFoundError)
True
>>> str(InvalidFraction("out-of-order fraction must be within 0-100 %, got 120"))
'out-of-order fraction must be within 0-100 %, got 120'
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class SourceError(MoiraeError):
    """Root of the stream-source errors."""


class SourceFileNotFound(SourceError, FileNotFoundError):
    """The file to replay (or a scenario file) does not exist."""


class UnsupportedFormat(SourceError, ValueError):
    """The file is neither CSV nor Parquet."""


class MissingColumn(SourceError, KeyError):
    """The event-time column named in the configuration is not in the file."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class NonTemporalColumn(SourceError, TypeError):
    """The event-time column holds no values that can be read as time."""


class InvalidFraction(SourceError, ValueError):
    """An out-of-order fraction outside 0-100 %."""


class InvalidDelayRange(SourceError, ValueError):
    """A negative delay, or a minimum delay above the maximum."""


class InvalidReplayOption(SourceError, ValueError):
    """Any other bad replay option (unit, distribution, speed-up, seed)."""


class ScenarioConfigError(SourceError, ValueError):
    """An unknown key or a bad value in a scenario file (message names key and file)."""


class UnparseableRows(SourceError, ValueError):
    """Rows whose event time cannot be parsed reached a place that cannot dead-letter them."""


class UnknownSourceKind(SourceError, LookupError):
    """A monitor file names a source kind no module registered (moirae.sources.kinds)."""

    def __str__(self) -> str:  # LookupError would not, but keep it plain like MissingColumn
        return str(self.args[0]) if self.args else ""


class InvalidSourceOption(SourceError, ValueError):
    """A bad option of a source kind built on Spark's own readers (``file``, ``rate``,
    the receivers' inboxes), such as its admission control (moirae.sources.bounds)."""
