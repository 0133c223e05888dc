"""The Archiver's settings (a frozen slice of the engine configuration)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

DEFAULT_CHUNK_TARGET_ROWS = 500_000
"""The engine's default ``archive.chunk_target_rows`` (``config/moirae.yaml`` says why).
:class:`ArchiveSettings` itself defaults to no rate-based choice (one ``chunk_span``)."""


@dataclass(frozen=True)
class ArchiveSettings:
    """``chunk_span``: width of one chunk on the global grid. ``recent_chunks``: R, how
    many chunks behind the present tier stay indexed and materialized.
    ``statement_timeout_ms``: the ceiling for any one history-query.
    ``history_parallel_workers``: PostgreSQL parallel workers one history-query may start
    (:mod:`archive.history_plan`).

    Chunk intervals are per stream (see :mod:`archive.chunks`): a stream named
    in ``chunk_intervals`` gets that interval; otherwise, with ``chunk_target_rows`` set,
    a raw stream's interval is chosen from its observed density so that a chunk holds about
    that many rows (rounded down to a calendar-friendly step), ``chunk_span`` being only
    the guess while no batch has shown a rate, and revised while the stream is young
    (:func:`archive.chunks.settle`); otherwise it is ``chunk_span``."""

    chunk_span: timedelta = timedelta(hours=1)
    recent_chunks: int = 24
    statement_timeout_ms: int = 30_000
    present_cache_rows: int = 2_000_000
    chunk_target_rows: int | None = None
    chunk_intervals: Mapping[str, timedelta] = field(default_factory=dict)
    history_parallel_workers: int = 0

    def __post_init__(self) -> None:
        if self.chunk_span <= timedelta(0):
            raise ValueError(f"chunk_span must be positive, got {self.chunk_span}")
        if self.recent_chunks < 0:
            raise ValueError(f"recent_chunks must be >= 0, got {self.recent_chunks}")
        if self.statement_timeout_ms <= 0:
            raise ValueError(f"statement_timeout_ms must be > 0, got {self.statement_timeout_ms}")
        if self.history_parallel_workers < 0:
            raise ValueError(f"history_parallel_workers must be >= 0, got {self.history_parallel_workers}")
        if self.chunk_target_rows is not None and self.chunk_target_rows <= 0:
            raise ValueError(f"chunk_target_rows must be > 0 (or None: no rate-based choice), "
                             f"got {self.chunk_target_rows}")
        for name, span in self.chunk_intervals.items():
            if not isinstance(span, timedelta) or span < timedelta(seconds=1) or span % timedelta(seconds=1):
                raise ValueError(f"chunk_intervals[{name!r}] must be a whole number of seconds >= 1 s, got {span!r}")
