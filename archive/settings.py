"""The Archiver's settings (a frozen slice of the engine configuration)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class ArchiveSettings:
    """``chunk_span``: width of one chunk on the global grid. ``recent_chunks``: R, how
    many chunks behind the present tier stay indexed and materialized.
    ``statement_timeout_ms``: the ceiling for any one history-query."""

    chunk_span: timedelta = timedelta(hours=1)
    recent_chunks: int = 24
    statement_timeout_ms: int = 30_000
    present_cache_rows: int = 2_000_000

    def __post_init__(self) -> None:
        if self.chunk_span <= timedelta(0):
            raise ValueError(f"chunk_span must be positive, got {self.chunk_span}")
        if self.recent_chunks < 0:
            raise ValueError(f"recent_chunks must be >= 0, got {self.recent_chunks}")
        if self.statement_timeout_ms <= 0:
            raise ValueError(f"statement_timeout_ms must be > 0, got {self.statement_timeout_ms}")
