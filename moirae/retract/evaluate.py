"""Does an alert still stand once some of its source rows are removed or corrected?

HUKA's deletion rule (H 5): set the deleted facts to zero in the answer's provenance
polynomial; an answer whose polynomial becomes 0 is gone. For a windowed aggregate the
annotation carries each tuple's value (the semimodule form), so the aggregate is
evaluated again with the removed tuples dropped and the corrected ones at their new
values, and the alert stands only if it still crosses its threshold.

An :class:`Evaluator` answers that per alert with a :class:`Verdict`. Two are here:

- :class:`LineageEvaluator`, from the Ananke lineage alone (A 3): an alert stands while
  at least one of its source tuples is not removed. Exact for a filter or a projection
  (each derivation is one tuple); for a join or an aggregate it is the why-provenance
  approximation, and it cannot judge a correction (it keeps the alert, ``exact=False``).
- :class:`PolynomialEvaluator` (when the engine keeps how-provenance polynomials):
  exact for filter, join, union and window aggregates, corrections included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from moirae.retract.lookup import QueryGraph, sink_payloads, sources_of_events


@dataclass(frozen=True)
class Verdict:
    """Whether alert ``eid`` still stands, with its re-evaluated value (if an aggregate)
    and why not, in words (``support vanished``, ``sum 80 no longer > 90``)."""

    eid: str
    holds: bool
    why: str = ""
    value: float | None = None
    exact: bool = True


class Evaluator(Protocol):
    def evaluate(self, event: str, eids: Sequence[str], removed: set[int],
                 corrected: Mapping[int, Mapping[str, Any]]) -> dict[str, Verdict]:
        """A verdict for each of ``eids`` (alerts of event-query ``event``) with the
        source ids ``removed`` gone and ``corrected`` at their new values."""


class LineageEvaluator:
    """Verdicts from the Ananke graphs' lineage (module doc)."""

    def __init__(self, graphs: Callable[[], Mapping[str, QueryGraph]]) -> None:
        self.graphs = graphs

    def evaluate(self, event: str, eids: Sequence[str], removed: set[int],
                 corrected: Mapping[int, Mapping[str, Any]]) -> dict[str, Verdict]:
        qg = self.graphs().get(event)
        support = sources_of_events(qg, eids) if qg is not None else {}
        out = {}
        for eid in eids:
            srcs = support.get(eid, set())
            left = srcs - removed
            if srcs and not left:
                out[eid] = Verdict(eid, False, f"support vanished: all {len(srcs)} source row(s) retracted")
            else:
                touched = bool(srcs & set(corrected))
                out[eid] = Verdict(eid, True, "corrected rows not judged from lineage" if touched else "",
                                   exact=not touched)
        return out


class PolynomialEvaluator:
    """Verdicts from the stored how-provenance polynomials (H 3-5; ``ananke/poly_store.py``,
    ``ananke/poly_eval.py``): each alert's polynomial is evaluated with the removed
    source ids at zero and the corrected ones at their new values, and its event-query's
    conditions checked on the result. An alert without a polynomial, or one the
    evaluation does not cover (a correction of a join key, say), is judged by
    ``fallback`` (``exact=False``)."""

    def __init__(self, polys, graphs: Callable[[], Mapping[str, QueryGraph]], fallback: Evaluator) -> None:
        self.polys = polys
        self.graphs = graphs
        self.fallback = fallback

    def evaluate(self, event: str, eids: Sequence[str], removed: set[int],
                 corrected: Mapping[int, Mapping[str, Any]]) -> dict[str, Verdict]:
        from ananke.poly_eval import evaluate_many

        plan = self.polys.plans().get(event)
        qg = self.graphs().get(event)
        if plan is None or plan.kind == "none" or qg is None:
            return self.fallback.evaluate(event, eids, removed, corrected)
        sinks = sink_payloads(qg, eids)
        polys = self.polys.get(event, sorted(sinks))
        outcomes = evaluate_many(plan, [(sid, polys[sid], sinks[sid][1]) for sid in polys], removed, corrected)
        out: dict[str, Verdict] = {}
        for sid, o in outcomes.items():
            eid = sinks[sid][0]
            value = _first_value(o.values)
            if o.holds is None:
                continue  # not covered: the fallback judges it
            if o.support == 0:
                v = Verdict(eid, False, "support vanished: every derivation used a retracted row", value)
            elif not o.holds:
                shown = ", ".join(f"{k}={_num(x)}" for k, x in sorted(o.values.items())) or "its row"
                v = Verdict(eid, False, f"{shown} no longer satisfies {' and '.join(plan.conditions) or 'its query'}",
                            value)
            else:
                v = Verdict(eid, True, "", value)
            prev = out.get(eid)
            out[eid] = v if prev is None or (v.holds and not prev.holds) else prev  # any sink standing keeps it
        rest = [e for e in eids if e not in out]
        if rest:
            for eid, v in self.fallback.evaluate(event, rest, removed, corrected).items():
                out[eid] = Verdict(v.eid, v.holds, v.why, v.value, exact=v.exact and not corrected)
        return out


def _first_value(values: Mapping[str, Any]) -> float | None:
    for v in values.values():
        try:
            return float(v)
        except (TypeError, ValueError):
            continue
    return None


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)
