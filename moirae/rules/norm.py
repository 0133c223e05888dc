"""Suppress or escalate an alert by its historical norm (M 3.2, fig. 2; M 4.6).

M fig. 2's hybrid query "filters out alerts where the resource consumption is within some
historical norm": a Recall computes, for each alert, the mean and standard deviation of
the metric in the key's history (rows with ``mean_<m>`` and ``sd_<m>``, like the
cluster's ``norm``), and a filter downstream of it keeps or drops the alert. Because the
Recall reads history newest chunk first, its output is revised as older chunks arrive
(M 4.5.1), so the filter must process revisions (M 4.6): this judge runs the norm's
revised stream, each row extended with the alert's value and its distance ``z`` in
standard deviations, through two :class:`recall.revision_ops.RevisionFilter`\\ s:

- ``known``: the norm gives a distance (sd > 0, or sd = 0 with the value off the mean);
- ``line``: the rule's side of its line: ``|z| <= k`` (suppress) or ``|z| >= k``
  (escalate).

An INSERT out of ``line`` means a revision moved the alert onto the rule's side, a
DELETE that one moved it off: exactly the crossings the rule must act on and report. The
BOUNDARY the Recall Manager publishes once the event's recall has ended (M 4.6) makes
the verdict final.

Verdicts. ``suppress``: ``pending`` (no usable norm yet, or less history than
``settle``), ``suppressed``, ``raised``. ``escalate``: ``pending``, ``escalated``,
``normal``. A verdict is *provisional* until its recall's boundary, then *final*; an
event whose recall ends without a usable norm is ``raised`` / ``normal`` (fail open: an
alert is never silenced for lack of history).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from moirae.incidents.store import metric_of, norm_of
from recall.api import Output, OutputKind
from recall.revision_ops import RevisionFilter

KINDS = ("suppress", "escalate")


@dataclass(frozen=True)
class NormRule:
    """A suppress or escalate rule: ``event``'s alerts, judged by Recall ``recall``'s
    norm with line ``k`` (standard deviations). ``metric``: the event attribute holding
    the alert's value (default: as the incident store finds it, ``avg_<m>`` or ``<m>``).
    ``settle``: history the norm must cover before a verdict is taken (None: the first
    estimate decides)."""

    name: str
    event: str
    recall: str
    kind: str
    k: float
    metric: str | None = None
    settle: timedelta | None = None


@dataclass(frozen=True)
class Verdict:
    """One rule's judgement of one alert (module doc)."""

    rule: str
    kind: str
    state: str
    final: bool
    z: float | None = None
    value: float | None = None
    mean: float | None = None
    sd: float | None = None
    covered_s: float | None = None

    def row(self, k: float) -> dict[str, Any]:
        """The verdict as an output row (API, terminal)."""
        return {"disposition": self.state, "final": self.final, "k": k,
                **{n: v for n, v in (("z", self.z), ("value", self.value), ("mean", self.mean), ("sd", self.sd),
                                     ("history_s", self.covered_s)) if v is not None and math.isfinite(v)}}


def distance(value: float | None, mean: float, sd: float) -> float | None:
    """``(value - mean) / sd``; with ``sd = 0``, 0 on the mean and infinite off it.

    >>> distance(150.0, 120.0, 30.0), distance(120.0, 120.0, 0.0), distance(130.0, 120.0, 0.0)
    (1.0, 0.0, inf)
    """
    if value is None or not math.isfinite(mean) or not math.isfinite(sd) or sd < 0:
        return None
    if sd == 0:
        return 0.0 if value == mean else math.copysign(math.inf, value - mean)
    return (value - mean) / sd


class NormJudge:
    """Runs one :class:`NormRule` over its Recall's outputs (module doc). Not thread-safe:
    the caller serialises outputs."""

    def __init__(self, rule: NormRule) -> None:
        if rule.kind not in KINDS:
            raise ValueError(f"rule {rule.name!r}: kind must be one of {KINDS}, got {rule.kind!r}")
        self.rule = rule
        k = float(rule.k)
        inside = rule.kind == "suppress"
        self.known = RevisionFilter(f"{rule.name}:known", lambda r: r["_z"] is not None)
        self.line = RevisionFilter(f"{rule.name}:line",
                                   (lambda r: r["_z"] is not None and abs(r["_z"]) <= k) if inside else
                                   (lambda r: r["_z"] is not None and abs(r["_z"]) >= k))
        self.verdicts: dict[str, Verdict] = {}
        self.crossings = 0  # revisions that moved an alert across the line after a first verdict

    def on_output(self, out: Output, attrs: Mapping[str, Any] | None) -> Verdict | None:
        """Take one output of the rule's Recall for an alert whose attributes are
        ``attrs``; returns the alert's new verdict when it changed, else None."""
        if out.operator != self.rule.recall:
            return None
        before = self.verdicts.get(out.eid)
        if out.kind is OutputKind.BOUNDARY:
            self.known.on_output(out)
            self.line.on_output(out)
            cur = before or Verdict(self.rule.name, self.rule.kind, "pending", False)
            state = cur.state if cur.state != "pending" else self._off()
            new = replace(cur, state=state, final=True)
            self.verdicts.pop(out.eid, None)
            return new if new != before else None
        row = dict(out.row)
        norm = norm_of(row, self.rule.metric)
        z = value = mean = sd = None
        if norm is not None and attrs is not None:
            m, mean, sd = norm
            value = metric_of(attrs, m, self.rule.metric)
            z = distance(value, mean, sd)
        row["_z"] = z
        ext = Output(out.operator, out.eid, out.event_ts, out.kind, out.seq, out.key, row, out.covered)
        self.known.on_output(ext)
        self.line.on_output(ext)
        covered = None if out.covered is None else (out.covered.end - out.covered.start).total_seconds()
        known = self._held(self.known, out.eid)
        on_line = self._held(self.line, out.eid)
        settled = self.rule.settle is None or (covered is not None and covered >= self.rule.settle.total_seconds())
        if not known or not settled:
            state = "pending"
        else:
            state = self._on() if on_line else self._off()
        new = Verdict(self.rule.name, self.rule.kind, state, False,
                      *((z, value, mean, sd) if out.kind is not OutputKind.DELETE else (None,) * 4), covered)
        if before is not None and before.state not in ("pending", state) and state != "pending":
            self.crossings += 1
        self.verdicts[out.eid] = new
        return new if new != before else None

    def _on(self) -> str:
        return "suppressed" if self.rule.kind == "suppress" else "escalated"

    def _off(self) -> str:
        return "raised" if self.rule.kind == "suppress" else "normal"

    @staticmethod
    def _held(op: RevisionFilter, eid: str) -> bool:
        ev = op.events.get(eid)
        return ev is not None and bool(ev.emitted)

    def forget(self, eid: str) -> None:
        self.verdicts.pop(eid, None)
