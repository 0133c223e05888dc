"""The Engine's rule methods: reference tables and rules over Recall results
(:mod:`moirae.rules`; M 3.2, 4.3, 4.6). A mixin of :class:`moirae.engine.engine.Engine`,
kept apart so the facade stays one screen per concern; it uses the engine's
``deploy``, ``db``, ``archiver``, ``alerts``, ``_rules`` and ``_dispositions``."""

from __future__ import annotations

from typing import Any


class RuleMethods:
    """Reference tables and rules on an engine (see the module doc)."""

    # -- reference tables and rules over Recall results (moirae.rules; M 3.2, 4.3, 4.6) ----

    def reference_table(self, name: str, *, csv=None, sql: str | None = None, key=None, valid_from=None,
                        dsn: str | None = None) -> dict[str, Any]:
        """Load reference table ``name`` (no time attribute: an inventory, owners, teams)
        from a CSV file or one read-only SELECT (on this database, or on ``dsn``); ``key``
        names the column(s) identifying a row. Declared again, it is reloaded: a new
        version, valid from ``valid_from`` (default now; a first load, from always), so
        history- and context-queries of an alert read the rows valid at its time
        (:mod:`archive.reference`). Returns what the load changed."""
        from moirae.rules import reference

        return reference.load(self.archiver, name, csv=csv, sql=sql, key=key, valid_from=valid_from, dsn=dsn)

    def reload_reference_table(self, name: str, *, csv=None, sql: str | None = None, valid_from=None,
                               dsn: str | None = None) -> dict[str, Any]:
        """Load a new version of an existing reference table (its key is kept)."""
        from moirae.rules import reference

        self.archiver.references.meta(name)  # exists, else ReferenceTableError naming the known ones
        return reference.load(self.archiver, name, csv=csv, sql=sql, valid_from=valid_from, dsn=dsn)

    def reference_tables(self) -> list[dict[str, Any]]:
        """Each reference table: name, key, columns, version."""
        return self.archiver.references.status()

    def rule(self, event: str, recall: str, kind: str = "suppress", **options: Any):
        """Declare a rule over Recall ``recall``'s results for ``event``'s alerts
        (:meth:`moirae.rules.book.RuleBook.add`): ``kind="suppress"`` keeps alerts within
        ``k`` standard deviations of their norm out of the incidents (M fig. 2),
        ``"escalate"`` marks those beyond ``k``, ``"join"`` joins the Recall's output with
        archived stream ``stream`` on ``on`` under ``analysis="event"`` or ``"present"``
        (M figs. 10, 12). Options: ``name``, ``k``, ``metric``, ``hold``, ``settle``;
        ``stream``, ``on``, ``analysis``, ``validity``, ``lookback``."""
        book = self.rules
        operators = self._recall_operators()
        attached = {e: list(ops) for e, ops in self.deploy.operators.items()}
        return book.add(event, recall, kind, operators=operators, attached=attached, **options)

    def drop_rule(self, name: str):
        """Retire a rule declared by :meth:`rule` (its held alerts go on to the incidents)."""
        return self.rules.remove(name)

    @property
    def rules(self):
        """The rules over Recall results (:class:`moirae.rules.book.RuleBook`), made on first use."""
        if self._rules is None:
            from moirae.rules.book import RuleBook

            d = self.deploy
            self._rules = RuleBook(self.db, self.archiver, d.events, d.incidents.record, d.results,
                                   d.manager.bus.publish, operators=self._recall_operators)
            self._dispositions = self._rules.store
            d.manager.add_sink(self._rules.on_output)
            # a suppressed alert pages no one: alerts under a suppress rule go out only
            # once the rules hand them to the incident store
            holds = self._rules.holds
            self.alerts.gated = lambda event_query: event_query in holds
            self._rules.pagers.append(self.alerts.release)
        return self._rules

    def _recall_operators(self) -> dict[str, Any]:
        """The Recall Manager's operators now, by name (rules bind to these objects)."""
        return {d.operator: d.recall_operator for d in self.deploy.manager.descriptions()}

    @property
    def dispositions(self):
        """Alert dispositions under the rules (:class:`moirae.rules.store.DispositionStore`)."""
        return self._dispositions
