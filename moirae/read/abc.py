"""The one surface the fronts ask of an engine.

The fronts (the CLI, the HTTP API, the console, the terminal board and the read-only
console) call only what :class:`EngineSurface` declares: :class:`ReadSurface` for what
they show and :class:`SteerSurface` for steering (M 4.4). Two classes implement it:

- :class:`moirae.Engine`, the engine running in this process (steerable);
- :class:`moirae.read.readonly.ReadOnlyEngine`, a view over the database of an engine
  that does not run in this process (``moirae console``): it has no Recall Manager, so
  :meth:`ReadSurface.steerable` is False, :meth:`ReadSurface.tasks` is empty and every
  steering call raises :class:`EngineNotRunning`.

``tests/api/test_surface.py`` checks that both implement every member with a compatible
signature.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from moirae.read.errors import EngineNotRunning

__all__ = ["EngineNotRunning", "EngineSurface", "ReadSurface", "SteerSurface"]

if TYPE_CHECKING:
    from ananke.store import GraphStore
    from archive import Archiver
    from moirae.config import Settings
    from moirae.incidents.store import IncidentStore
    from moirae.ingest.events import EventLog
    from moirae.rules.store import DispositionStore
    from recall.outputs import Bus, StoredOutputs
    from recall.task import TaskView


@runtime_checkable
class ReadSurface(Protocol):
    """What the fronts read: the event log, the recall results, incidents, the archive,
    the live bus and the Recall Manager's tasks."""

    @property
    def settings(self) -> Settings:
        """The engine's configuration (``api``, ``data_dir``, ``scenario``, ...)."""

    @property
    def events(self) -> EventLog:
        """The event log (``get``, ``list``, ``known``)."""

    @property
    def results(self) -> StoredOutputs:
        """The recall results table (``flush``, ``read``)."""

    @property
    def incidents(self) -> IncidentStore:
        """The incident store (list, get, acknowledge, resolve, resolutions)."""

    @property
    def bus(self) -> Bus:
        """The bus of new events, recall outputs and incident updates (the live stream)."""

    @property
    def archive(self) -> Archiver:
        """The archive; the fronts only read it (``status``, ``chunks``, ``stream``,
        ``streams``, ``read``; :mod:`moirae.read.archive_view` for dead letters and series)."""

    @property
    def dispositions(self) -> DispositionStore:
        """The alerts' dispositions under the rules (``get``, ``of``, ``list_events``; :mod:`moirae.rules`)."""

    def steerable(self) -> bool:
        """Whether steering can act: an engine with a Recall Manager runs in this process."""

    def tasks(self, eid: str | None = None) -> list[TaskView]:
        """The Recall Manager's tasks (of ``eid``, or all); empty without a manager."""

    def scheduler_state(self) -> dict[str, Any] | None:
        """``running_queries``, ``max_concurrent`` and ``open_events`` of the Recall
        Manager, or None without one."""

    def similarity_operators(self) -> set[str]:
        """The names of the Similarity Recall operators (M 3.4) known here."""

    def provenance_graph(self, event: str) -> GraphStore | None:
        """The provenance graph of event-query ``event`` (A 3), or None."""

    def event_inputs(self, event: str) -> tuple[str, list[str]] | None:
        """The event-query's eid column and input streams, or None when unknown here."""

    def status(self) -> dict[str, Any]:
        """The archive's status, with the live path's under ``live`` when there is one."""

    def live_status(self) -> dict[str, Any] | None:
        """The live path's health (archive waits, event-queries, workers), or None."""

    def monitors(self) -> list[dict[str, Any]]:
        """The deployed monitors (:mod:`moirae.deploy.lifecycle`): ``name``, ``version``,
        ``state``, ``deployed_at``; a running engine adds what each deployed, rows per
        second, alerts, open tasks and the materialized span."""

    def forward_lookup(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        """Which alerts the source rows ``selection`` names fed, which are still open,
        and whether future alerts can still use them (:mod:`moirae.retract.lookup`)."""

    def alert_support(self, eid: str) -> dict[str, Any]:
        """Alert ``eid``'s status (active / retracted, with the reason) and whether its
        support is still in the archive (:mod:`moirae.retract.support`)."""

    def retraction_list(self, limit: int = 100) -> list[dict[str, Any]]:
        """The retractions and corrections, newest first (:mod:`moirae.retract`)."""

    def retraction(self, rid: int) -> dict[str, Any]:
        """One retraction, with the alerts it withdrew."""


@runtime_checkable
class SteerSurface(Protocol):
    """Steering an event's recall (M 4.4). A surface that is not :meth:`ReadSurface.steerable`
    raises :class:`EngineNotRunning`."""

    def cancel(self, eid: str) -> int:
        """Cancel every recall task of ``eid``; returns how many were cancelled."""

    def cancel_many(self, eids: Iterable[str]) -> dict[str, int]:
        """Cancel the recall of several events at once; cancelled tasks per event."""

    def accelerate(self, eid: str, tickets: int = 100) -> int:
        """Give every recall task of ``eid`` ``tickets`` more; returns how many."""

    def deploy_text(self, text: str) -> dict[str, Any]:
        """Deploy the monitor a monitor file's ``text`` declares, on the running engine
        (the same version again: ``unchanged``; another: ``updated``)."""

    def undeploy_monitor(self, name: str, drop_archive: bool = False) -> dict[str, Any]:
        """Retire monitor ``name``; its archive is kept unless ``drop_archive``."""

    def retract(self, selection: Mapping[str, Any], reason: str, author: str,
                set_values: Mapping[str, Any] | None = None, confirm: bool = False,
                audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Retract (or correct, with ``set_values``) source rows; the alerts they fed are
        evaluated again (:meth:`moirae.retract.service.Retractions.retract`)."""

    def undo_retraction(self, rid: int, author: str,
                        audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Undo retraction ``rid``; the alerts it withdrew that stand again come back."""


@runtime_checkable
class EngineSurface(ReadSurface, SteerSurface, Protocol):
    """Everything a front may ask of an engine (module doc)."""
