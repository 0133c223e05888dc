"""The rules a monitor declares over its Recall results (M 3.2 fig. 2, M 4.6 figs. 10-12).

:class:`RuleBook` holds an engine's rules and runs them on the Recall Manager's outputs
(it is one of the manager's sinks):

- **suppress** / **escalate** (:mod:`moirae.rules.norm`): each rule's verdict on each
  alert; an alert's *disposition* combines them: ``escalated`` if an escalate rule says
  so, else ``suppressed`` if a suppress rule says so, else ``pending`` while a suppress
  rule has no verdict yet, else ``raised``. It is provisional until every rule's recall
  has ended for the alert, then final. The gate (:mod:`moirae.rules.gate`) keeps
  suppressed alerts out of the incident store; every change is stored
  (:mod:`moirae.rules.store`) with a note saying what crossed which line, published on
  the bus as ``{"type": "disposition", ...}``, and written as the rule's own output
  (operator = the rule's name, key ``disposition``), which the API's event view, its
  live stream and the terminal board show beside the Recall's.
- **join** (:mod:`moirae.rules.join`): the Recall's output joined with a live stream,
  under event or present analysis; its rows are the rule's outputs.

``pagers``: callables told of each alert that is handed to the incident store (which is
what pages on-call) with its disposition: a delivery subscribes here, and a suppressed
alert never reaches it.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from moirae.base.durations import parse_duration
from moirae.rules.errors import RuleError
from moirae.rules.gate import AlertGate
from moirae.rules.join import JoinRule, JoinRunner
from moirae.rules.norm import KINDS, NormJudge, NormRule, Verdict
from moirae.rules.store import DispositionStore
from recall.api import Output, OutputKind

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def combine(verdicts: list[Verdict], suppress_rules: int) -> str:
    """An alert's disposition from its rules' verdicts (module doc); ``suppress_rules``
    is how many suppress rules judge its type (one without a verdict yet is pending).

    >>> v = lambda kind, state: Verdict("r", kind, state, False)
    >>> combine([v("suppress", "suppressed"), v("escalate", "normal")], 1)
    'suppressed'
    >>> combine([v("suppress", "suppressed"), v("escalate", "escalated")], 1)
    'escalated'
    >>> combine([v("escalate", "normal")], 1)
    'pending'
    """
    if any(v.kind == "escalate" and v.state == "escalated" for v in verdicts):
        return "escalated"
    sup = [v for v in verdicts if v.kind == "suppress"]
    if any(v.state == "suppressed" for v in sup):
        return "suppressed"
    if any(v.state == "pending" for v in sup) or len(sup) < suppress_rules:
        return "pending"
    return "raised"


class RuleBook:
    """An engine's rules (module doc). ``events`` is the event log (its ``get`` and
    ``listeners``); ``forward`` the incident store's ``record``, which the gate replaces
    among the log's listeners once a suppress rule exists; ``results`` and ``publish``
    where the rules' outputs go."""

    def __init__(self, db, archiver, events, forward: Callable[[list], Any], results, publish: Callable[[Any], None],
                 tick: float = 0.2, operators: Callable[[], dict[str, Any]] | None = None) -> None:
        self.archiver = archiver
        self.events = events
        self.results = results
        self.publish = publish
        self.store = DispositionStore(db)
        self.rules: dict[str, NormRule | JoinRule] = {}
        self.judges: dict[str, NormJudge] = {}
        self.joins: dict[str, JoinRunner] = {}
        self.holds: dict[str, float] = {}  # event type -> seconds its alerts wait for a verdict
        self.pagers: list[Callable[[dict[str, Any]], None]] = []
        self._forward = forward
        self.gate = AlertGate(forward, self.holds.get, self._forwarded, self._held)
        self._installed = False
        self._lock = threading.RLock()
        self._verdicts: dict[str, dict[str, Verdict]] = {}  # eid -> rule -> latest verdict
        self._state: dict[str, tuple[str, bool]] = {}  # eid -> (disposition, final) last stored
        self._seq: dict[tuple[str, str], int] = {}
        self._records: dict[str, Any] = {}
        self._operators = operators  # the Recall Manager's operators now: name -> operator object
        self._bound: dict[str, Any] = {}  # rule -> the recall operator object it was declared on
        self._stop = threading.Event()
        self._tick = tick
        self._thread: threading.Thread | None = None
        self.errors = 0

    # -- declaring --------------------------------------------------------------------

    def add(self, event: str, recall: str, kind: str, *, name: str | None = None, operators: dict[str, Any],
            attached: dict[str, list[str]], k: float = 3.0, metric: str | None = None,
            hold: Any = "10s", settle: Any = None, stream: str | None = None, on: Any = None,
            analysis: str = "event", validity: Any = None, lookback: Any = "1h") -> NormRule | JoinRule:
        """Declare a rule (validated whole before anything changes). ``operators``: the
        Recall Manager's operators (name -> operator object); ``attached``: each deployed
        event-query's operators. Rules whose Recall was retired or replaced since they
        were declared (a monitor undeployed or redeployed) are retired first (:meth:`purge`)."""
        self.purge(operators)
        where = f"rule {name or '(unnamed)'!r} of {event!r}"
        if kind not in (*KINDS, "join"):
            raise RuleError(f"{where}: kind must be one of {[*KINDS, 'join']}, got {kind!r}")
        name = name or f"{event}_{kind}_{recall}"
        where = f"rule {name!r} of {event!r}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise RuleError(f"{where}: name must be an identifier (letters, digits, _)")
        if name in self.rules or name in operators:
            raise RuleError(f"{where}: the name is already taken by a rule or a recall operator")
        if recall not in operators:
            raise RuleError(f"{where}: recall {recall!r} is not deployed (recall operators: {sorted(operators)})")
        if event in attached:
            if recall not in attached[event]:
                raise RuleError(f"{where}: recall {recall!r} is not attached to event-query {event!r} "
                                f"(its recalls: {attached[event]})")
        elif any(recall in ops for ops in attached.values()):
            raise RuleError(f"{where}: unknown event-query {event!r} (deployed: {sorted(attached)})")

        def duration(key: str, value: Any) -> timedelta | None:
            if value is None:
                return None
            try:
                d = parse_duration(value)
            except Exception as exc:
                raise RuleError(f"{where}: {key} {value!r} is not a duration: {exc}") from None
            if d < timedelta(0):
                raise RuleError(f"{where}: {key} must not be negative, got {value!r}")
            return d

        if kind == "join":
            if stream is None or on is None:
                raise RuleError(f"{where}: a join needs stream= (an archived stream) and on= (the join column)")
            try:
                self.archiver.stream(stream)
            except Exception:
                raise RuleError(f"{where}: stream {stream!r} is not an archived stream "
                                f"(streams: {sorted(s.name for s in self.archiver.streams())})") from None
            if analysis not in ("event", "present"):
                raise RuleError(f"{where}: analysis must be 'event' or 'present', got {analysis!r}")
            if not (isinstance(on, str) or (isinstance(on, list | tuple) and len(on) == 2)):
                raise RuleError(f"{where}: on must be a column or a pair (recall column, stream column), got {on!r}")
            rule = JoinRule(name, event, recall, stream, on if isinstance(on, str) else (str(on[0]), str(on[1])),
                            analysis, duration("validity", validity), duration("lookback", lookback) or timedelta(0))
            with self._lock:
                self.rules[name] = rule
                self._bound[name] = operators[recall]
                self.joins[name] = JoinRunner(rule, self.archiver)
                self._start()
            return rule
        if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k <= 0:
            raise RuleError(f"{where}: k must be a positive number of standard deviations, got {k!r}")
        hold_d = duration("hold", hold) or timedelta(0)
        rule = NormRule(name, event, recall, kind, float(k), metric, duration("settle", settle))
        with self._lock:
            if kind == "suppress":
                self._install()  # first: a refusal leaves the book as it was
                self.holds[event] = max(self.holds.get(event, 0.0), hold_d.total_seconds())
            self.rules[name] = rule
            self._bound[name] = operators[recall]
            self.judges[name] = NormJudge(rule)
            self._start()
        return rule

    def remove(self, name: str) -> NormRule | JoinRule:
        """Retire rule ``name`` (a monitor undeployed): it judges nothing more; the alerts
        it held are forwarded, those it kept out stay out."""
        with self._lock:
            rule = self.rules.pop(name, None)
            if rule is None:
                raise RuleError(f"no rule {name!r} (rules: {sorted(self.rules)})")
            self.judges.pop(name, None)
            self.joins.pop(name, None)
            self._bound.pop(name, None)
            last = isinstance(rule, NormRule) and rule.kind == "suppress" and not any(
                j.rule.kind == "suppress" and j.rule.event == rule.event for j in self.judges.values())
            if last:
                self.holds.pop(rule.event, None)
        if last:
            self.gate.release(rule.event)
        return rule

    def purge(self, operators: dict[str, Any] | None = None) -> list[str]:
        """Retire the rules whose Recall is no longer the operator they were declared on
        (unregistered, or registered anew by a redeployed monitor); returns their names."""
        if operators is None:
            if self._operators is None:
                return []
            operators = self._operators()
        with self._lock:
            stale = [n for n, op in self._bound.items() if operators.get(self.rules[n].recall) is not op]
        for n in stale:
            try:
                self.remove(n)
            except RuleError:  # retired meanwhile (another purge)
                continue
            log.info("rules: rule %r retired: its recall is gone or was replaced", n)
        return stale

    def _install(self) -> None:
        """Put the gate in the incident store's place among the event log's listeners."""
        if self._installed:
            return
        listeners = self.events.listeners
        for i, listener in enumerate(listeners):
            if listener == self._forward:
                listeners[i] = self.gate.record
                self._installed = True
                return
        raise RuleError("a suppress rule needs the incident store among the event log's listeners; it is not there")

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="moirae-rules", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        rounds = 0
        while not self._stop.wait(self._tick):
            rounds += 1
            try:
                self.gate.expire()
                self.catch_up()
                if rounds % 5 == 0:
                    self.purge()
            except Exception as exc:
                self.errors += 1
                log.warning("rules: releasing held alerts or feeding joins failed: %s", exc)

    def catch_up(self) -> None:
        """Feed every join its live stream's new rows (present analysis revises open alerts' rows)."""
        with self._lock:
            for runner in self.joins.values():
                for o in runner.catch_up():
                    self._emit(o)

    # -- running ----------------------------------------------------------------------

    def on_output(self, out: Output) -> None:
        """The Recall Manager's sink: run every rule over its Recall's outputs."""
        try:
            with self._lock:
                self._on_output(out)
        except Exception as exc:
            self.errors += 1
            log.warning("rules: output of %s for %s not applied: %s", out.operator, out.eid, exc)

    def _on_output(self, out: Output) -> None:
        for runner in self.joins.values():
            if runner.rule.recall == out.operator:
                for o in runner.on_output(out):
                    self._emit(o)
        judges = [j for j in self.judges.values() if j.rule.recall == out.operator]
        if not judges:
            return
        rec = self._record(out.eid)
        if rec is None or all(j.rule.event != rec.event for j in judges):
            return
        changed = []
        for j in judges:
            if j.rule.event != rec.event:
                continue
            v = j.on_output(out, rec.attrs)
            if v is not None:
                self._verdicts.setdefault(out.eid, {})[j.rule.name] = v
                changed.append(v)
        if changed:
            self._judged(rec, changed)

    def _record(self, eid: str):
        rec = self._records.get(eid)
        if rec is None:
            rec = self.events.get(eid)
            if rec is not None:
                self._records[eid] = rec
        return rec

    def _judged(self, rec, changed: list[Verdict]) -> None:
        eid = rec.eid
        rules = [r for r in self.judges.values() if r.rule.event == rec.event]
        verdicts = self._verdicts.get(eid, {})
        n_sup = sum(1 for r in rules if r.rule.kind == "suppress")
        disposition = combine(list(verdicts.values()), n_sup)
        final = all(r.rule.name in verdicts and verdicts[r.rule.name].final for r in rules)
        before = self._state.get(eid, (None, False))
        for v in changed:
            self._emit_verdict(rec, v)
        if (disposition, final) == before:
            self._store(rec, disposition, final, verdicts, before[0], None)
            return
        note = self._note(before[0], disposition, final, changed)
        gated = rec.event in self.holds
        action = None
        if gated:
            resumed = None
            if disposition != "pending" and not self.gate.knows(eid) and self.store.opened(eid) is False:
                resumed = rec  # resumed after a restart, never handed over
            action = self.gate.decide(eid, disposition, resumed, note)
            if disposition == "suppressed" and action in (None, "already forwarded") and before[0] != "suppressed":
                note += "; its incident was already opened and stays (a page sent is not taken back)"
        self._state[eid] = (disposition, final)
        self._store(rec, disposition, final, verdicts, before[0], note, opened=None if gated else True)
        self.publish({"type": "disposition", "eid": eid, "event": rec.event, "disposition": disposition,
                      "final": final, "before": before[0], "note": note,
                      "pages": disposition in ("raised", "escalated") and (not gated or action == "forwarded")})
        if disposition == "escalated" and before[0] != "escalated" and not gated:
            self._page(rec, disposition, note)
        if final:
            self.gate.forget(eid)
            self._verdicts.pop(eid, None)
            self._state.pop(eid, None)
            self._records.pop(eid, None)
            for j in self.judges.values():
                j.forget(eid)

    def _store(self, rec, disposition: str, final: bool, verdicts: dict[str, Verdict], before: str | None,
               note: str | None, opened: bool | None = None) -> None:
        self.store.put(rec.eid, rec.event, rec.ts, disposition, final,
                       {n: v.row(self.judges[n].rule.k) for n, v in verdicts.items()}, before, note, opened)

    @staticmethod
    def _note(before: str | None, after: str, final: bool, changed: list[Verdict]) -> str:
        why = "; ".join(
            f"{v.rule}: " + (f"|z| {abs(v.z):.2f}" if v.z is not None and math.isfinite(v.z) else
                             "z infinite" if v.z is not None else "no usable norm")
            + (f" over {v.covered_s / 86400:.2f} d of history" if v.covered_s is not None else "")
            for v in changed)
        stage = "final" if final else "provisional"
        if before in (None, "pending"):
            head = f"{after} ({stage})"
        elif before == after:
            head = f"{after}, now final"
        elif before == "suppressed":
            head = f"un-suppressed by a revision: now {after} ({stage})"
        elif after == "suppressed":
            head = f"suppressed by a revision (was {before}, {stage})"
        else:
            head = f"{before} -> {after} by a revision ({stage})"
        return f"{head}: {why}" if why else head

    def _emit_verdict(self, rec, v: Verdict) -> None:
        key = (v.rule, rec.eid)
        first = key not in self._seq
        self._emit(Output(v.rule, rec.eid, rec.ts, OutputKind.INSERT if first else OutputKind.UPDATE,
                          0, "disposition", v.row(self.judges[v.rule].rule.k), None))
        if v.final:
            self._seq.pop(key, None)

    def _emit(self, out: Output) -> None:
        key = (out.operator, out.eid)
        seq = self._seq.get(key, 0) + 1
        self._seq[key] = seq
        out = Output(out.operator, out.eid, out.event_ts, out.kind, seq, out.key, out.row, out.covered)
        if out.kind is OutputKind.BOUNDARY:  # a join's last word on the event
            self._seq.pop(key, None)
        self.results.append(out)
        self.publish(out)

    # -- the gate's callbacks -----------------------------------------------------------

    def _held(self, records: list) -> None:
        with self._lock:
            self._hold_all(records)

    def _hold_all(self, records: list) -> None:
        for r in records:
            self._records[r.eid] = r
            hold = self.holds.get(r.event, 0.0)
            if r.eid not in self._state:
                self._state[r.eid] = ("pending", False)
                self.store.put(r.eid, r.event, r.ts, "pending", False, {}, None,
                               f"held: waiting for its norm (at most {hold:g} s) before it may open an incident")

    def _forwarded(self, rec, why: str) -> None:
        self.store.mark_opened(rec.eid, f"handed to the incident store: {why}")
        with self._lock:
            state = self._state.get(rec.eid, ("pending", False))[0]
        self._page(rec, state, why)

    def _page(self, rec, disposition: str, why: str) -> None:
        msg = {"eid": rec.eid, "event": rec.event, "disposition": disposition, "why": why}
        for pager in list(self.pagers):
            try:
                pager(msg)
            except Exception as exc:
                log.warning("rules: pager %r failed on %s: %s", pager, rec.eid, exc)

    # -- reading, closing ----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {"rules": {n: {"kind": getattr(r, "kind", "join"), "event": r.event, "recall": r.recall}
                          for n, r in self.rules.items()},
                "held": self.gate.held(), "kept_out": self.gate.kept(), "forwarded": self.gate.forwarded,
                "crossings": sum(j.crossings for j in self.judges.values()), "errors": self.errors}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
