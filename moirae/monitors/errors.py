"""Errors of monitor files (docs/MONITORS.md).

Every problem with a monitor file is one :class:`MonitorFileError` naming the file, the
line and the key at fault; :class:`MonitorUnavailable` is the one for a section the
file may declare but whose engine side this build does not have.

>>> e = MonitorFileError("unknown key 'sourcez'", file="m.yaml", line=3, key="sourcez")
>>> str(e)
"m.yaml:3: key 'sourcez': unknown key 'sourcez'"
>>> issubclass(MonitorUnavailable, MonitorFileError) and issubclass(MonitorFileError, ValueError)
True
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class MonitorFileError(MoiraeError, ValueError):
    """A monitor file that cannot be loaded, validated or deployed."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.message, self.file, self.line, self.key = message, file, line, key
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.file or '<monitor>'}:{self.line}" if self.line else f"{self.file or '<monitor>'}"
        key = f" key {self.key!r}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class MonitorUnavailable(MonitorFileError):
    """The file declares a section (or kind) whose engine side is not in this build."""


class UnsupportedSql(MonitorFileError):
    """An event-query's SQL that is not valid, or that the instrumented operators cannot
    express; ``sql_line`` is the line within the SQL text."""

    def __init__(self, message: str, *, sql_line: int = 1, **where) -> None:
        self.sql_line = sql_line
        where.setdefault("line", sql_line)
        super().__init__(message, **where)
