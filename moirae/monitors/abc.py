"""What deploying a monitor needs of an engine (docs/MONITORS.md).

``moirae.monitors`` never imports the engine: it is handed an object with these
members (the running :class:`moirae.Engine` has them all). Optional members of the
parts built elsewhere (``deploy_monitor``, ``reference_table``, ``rule``,
``route_alerts``, ``pattern_query``) are looked up with ``getattr``: a monitor declaring a
section (or, for ``pattern_query``, a ``MATCH_RECOGNIZE`` event-query) whose method the
engine lacks is refused as not available in this build.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class MonitorHost(Protocol):
    """The engine surface a monitor is validated against and deployed on."""

    @property
    def spark(self) -> Any: ...

    @property
    def archive(self) -> Any:
        """``streams()``, ``stream(name)``, ``register_stream(spec, chunk_interval)``,
        ``has_interval(name)``, ``grid_of(name)``."""

    @property
    def sources(self) -> Any:
        """The registered live sources: ``get(name)`` -> a source with ``df`` and ``ts``, or None."""

    @property
    def incidents(self) -> Any:
        """``configure(event, keys, window, gap, metric, threshold, series, norm)``."""

    def source(self, name: str, df: Any, ts: str, lateness: str = ..., indexes: Any = ..., retention: Any = ...,
               sparse: bool = ...) -> Any: ...

    def event_query(self, name: str, fn: Any, inputs: Any, eid: str = ..., ts: str = ...) -> Any: ...

    def context_query(self, event_name: str, fn: Any, inputs: Any = ..., name: str | None = ..., window: Any = ...,
                      surrounding: bool = ..., after: Any = ...) -> Any: ...

    def recall(self, event_name: str, sql: str, name: str | None = ..., **kwargs: Any) -> Any: ...

    def similarity_recall(self, event_name: str, k: int | None = ..., name: str | None = ...,
                          **kwargs: Any) -> Any: ...

    def event_inputs(self, event: str) -> tuple[str, list[str]] | None: ...

    def pattern_query(self, name: str, sql: str, inputs: str | Sequence[str] | None = ..., eid: str = ...,
                      ts: str = ...) -> Any:
        """Deploy a ``MATCH_RECOGNIZE`` event-query (docs/PATTERNS.md). Optional: a
        monitor file holding one is refused on a host without it
        (:mod:`moirae.monitors.pattern_sql`)."""
