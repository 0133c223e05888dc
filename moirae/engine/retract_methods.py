"""The Engine's retraction methods: retractions and corrections of source rows, their
undo, and forward lookup (:mod:`moirae.retract`; H 4-5, A 3). A mixin of
:class:`moirae.engine.engine.Engine`, kept apart so the facade stays one screen per
concern; it uses the engine's ``db``, ``archiver`` and ``deploy``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

#: how often the follower looks for rows and alerts that arrived after an active retraction
FOLLOW_INTERVAL_S = 2.0


class RetractMethods:
    """Retractions, corrections and forward lookup on an engine (see the module doc)."""

    @property
    def retractions(self):
        """The engine's :class:`moirae.retract.service.Retractions` (made on first use)."""
        svc = self.__dict__.get("_retractions")
        if svc is None:
            from moirae.retract.evaluate import LineageEvaluator, PolynomialEvaluator
            from moirae.retract.service import Retractions

            lineage = LineageEvaluator(self.query_graphs)
            polys = _poly_store(self.db)
            evaluator = lineage if polys is None else PolynomialEvaluator(polys, self.query_graphs, lineage)
            from recall.operator import Recall

            m, d = self.deploy.manager, self.deploy
            svc = Retractions(self.db, self.archiver, self.query_graphs, evaluator, d.results,
                              m.bus.publish, d.incidents, plans=None if polys is None else polys.plans,
                              events=d.events, max_share=self.settings.retract.max_share,
                              recalls=lambda: {n: op for n, op in list(d.ops.items()) if isinstance(op, Recall)},
                              open_events=m.open_events, deploy=d,
                              similarity=lambda: {ev: [d.deployed.similarity[n] for n in names
                                                       if n in d.deployed.similarity]
                                                  for ev, names in list(d.operators.items())})
            self.__dict__["_retractions"] = svc
        return svc

    def query_graphs(self) -> dict:
        """Every deployed event-query's provenance graph (:class:`moirae.retract.lookup.QueryGraph`)."""
        from moirae.retract.lookup import QueryGraph

        out = {}
        for name, flow in list(self.deploy.flows.items()):
            eq = self.deploy.event_queries.get(name)
            if flow.graph is not None and eq is not None:
                out[name] = QueryGraph(name, flow.graph, eq.eid, tuple(eq.inputs), eq.ts)
        return out

    def retract(self, selection: Mapping[str, Any], reason: str, author: str,
                set_values: Mapping[str, Any] | None = None, confirm: bool = False,
                audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Retract the source rows ``selection`` names (ids; stream, key and time range;
        or stream and SQL predicate), or with ``set_values`` correct them; the alerts
        they fed are evaluated again and withdrawn when they no longer stand
        (:meth:`moirae.retract.service.Retractions.retract`). Rows arriving later that
        match a range or predicate are flagged as they come."""
        out = self.retractions.retract(selection, reason, author, set_values, confirm, audit)
        self._follow_retractions()
        return out

    def undo_retraction(self, rid: int, author: str,
                        audit: Callable[[str, str, str | None, dict], None] | None = None) -> dict[str, Any]:
        """Undo retraction ``rid``; the alerts it withdrew that stand again come back."""
        return self.retractions.undo(int(rid), author, audit)

    def reconcile_retractions(self) -> dict[str, Any]:
        """Flag rows and evaluate alerts that arrived after active retractions (once)."""
        return self.retractions.reconcile()

    def retraction(self, rid: int) -> dict[str, Any]:
        """One retraction: its selection, reason, author, rows and the alerts it withdrew."""
        return self.retractions.get(int(rid))

    def retraction_list(self, limit: int = 100) -> list[dict[str, Any]]:
        """The retractions, newest first."""
        return self.retractions.list(limit)

    def forward_lookup(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        """Which alerts the rows ``selection`` names fed, which are open, and whether
        future alerts can still use them (:func:`moirae.retract.lookup.forward`)."""
        return self.retractions.lookup(selection)

    def alert_support(self, eid: str) -> dict[str, Any]:
        """Alert ``eid``'s status (active or retracted, with the reason) and whether its
        support is still in the archive (:func:`moirae.retract.support.alert_support`)."""
        from moirae.retract.support import alert_support

        record = self.events.get(eid)
        return alert_support(self.db, self.archiver, self.query_graphs(), record.event if record else None, eid)

    def _follow_retractions(self) -> None:
        """Start the follower thread once (module doc: racing live ingestion)."""
        if self.__dict__.get("_retract_follower") is not None:
            return
        stop = threading.Event()

        def run() -> None:
            import logging

            while not stop.wait(FOLLOW_INTERVAL_S):
                if getattr(self, "_closed", False):
                    return
                if not self.started:
                    continue
                try:
                    self.retractions.reconcile()
                except Exception as exc:  # the next round retries
                    logging.getLogger(__name__).warning("retractions: reconcile failed: %s", exc)

        t = threading.Thread(target=run, name="moirae-retractions", daemon=True)
        self.__dict__["_retract_follower"] = (t, stop)
        t.start()


def _poly_store(db):
    """The engine's how-provenance polynomial store, or None when this build has none."""
    try:
        from ananke.poly_store import PolyStore
    except ImportError:
        return None
    return PolyStore(db.connect, borrow=db.connection).create()
