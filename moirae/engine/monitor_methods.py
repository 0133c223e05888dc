"""The Engine's monitor methods: monitors deployed and retired on a running engine as
one unit each (:mod:`moirae.deploy.lifecycle`, :mod:`moirae.monitors`). A mixin of
:class:`moirae.engine.engine.Engine`, kept apart so the facade stays one screen per
concern; it uses the engine's ``deploy``, ``supervisor``, ``alerts``, ``db`` and
``_rules``."""

from __future__ import annotations

from typing import Any


class MonitorMethods:
    """Monitors on an engine (see the module doc)."""

    # -- monitors, deployed and retired on a running engine (moirae.deploy.lifecycle) --

    def deploy_monitor(self, name: str, version: str, text: str, apply) -> dict[str, Any]:
        """Deploy monitor ``name`` at ``version`` (its definition ``text``) as one unit:
        ``apply(engine)`` declares it through this engine's methods. The same version
        again does nothing; another version replaces it; a failing ``apply`` leaves the
        engine as it was (:meth:`moirae.deploy.lifecycle.Lifecycle.deploy`)."""
        return self.deploy.lifecycle.deploy(name, version, text, lambda: apply(self))

    def undeploy_monitor(self, name: str, drop_archive: bool = False) -> dict[str, Any]:
        """Retire monitor ``name``: its queries stopped, its tasks cancelled, its state
        freed; its archive kept unless ``drop_archive``
        (:meth:`moirae.deploy.lifecycle.Lifecycle.undeploy`)."""
        out = self.deploy.lifecycle.undeploy(name, drop_archive)
        self.supervisor.forget([f"{p}_{q}" for q in out["event_queries"] for p in ("event", "ankn")]
                               + [f"archive_{s}" for s in out["sources_stopped"]])
        return out

    undeploy = undeploy_monitor

    def _retire_attached(self, event_queries: list[str]) -> None:
        """Before a monitor's event-queries retire: the rules over their Recalls and their
        alert routes go (:attr:`moirae.deploy.lifecycle.Lifecycle.on_retire`)."""
        if self._rules is not None:
            for name, rule in list(self._rules.rules.items()):
                if rule.event in event_queries:
                    self._rules.remove(name)
        for q in event_queries:
            self.alerts.route(q, [])

    def deploy_text(self, text: str, origin: str | None = None) -> dict[str, Any]:
        """Deploy the monitor a monitor file's ``text`` declares (read by
        :attr:`monitor_loader`); ``origin``, the file it came from, names it in errors and
        anchors its relative paths."""
        name, version, apply = self.load_monitor(text, origin)
        return self.deploy_monitor(name, version, text, apply)

    def load_monitor(self, text: str, origin: str | None = None):
        """``(name, version, apply)`` of a monitor file's text: :attr:`monitor_loader` when
        set, else :mod:`moirae.monitors` (validated whole before anything is applied)."""
        if self.monitor_loader is not None:
            return self.monitor_loader(text)
        from moirae.monitors import loader_for

        return loader_for(self)(text, origin or "<monitor>")

    def _loaded(self, text: str):
        name, version, apply = self.load_monitor(text)
        return name, version, lambda: apply(self)

    #: ``text -> (name, version, apply)``; None: monitor files (:meth:`load_monitor`)
    monitor_loader = None

    def monitors(self) -> list[dict[str, Any]]:
        """The deployed monitors: name, version, state, what each deployed, rows per
        second, alerts, open tasks, materialized span
        (:meth:`moirae.deploy.lifecycle.Lifecycle.status`)."""
        return self.deploy.lifecycle.status(self.supervisor.status()["failed"])

    def footprint(self, samples: int = 5) -> dict[str, Any]:
        """Spark queries, threads, PostgreSQL sessions and open tasks held now
        (:func:`moirae.deploy.lifecycle.footprint`; compare with
        :func:`moirae.deploy.lifecycle.leaks`)."""
        from moirae.deploy.lifecycle import footprint

        return footprint(self._spark, self.db, self.deploy.manager, samples=samples)
