"""Rules over Recall results and reference tables (M 3.2 fig. 2, M 4.3, M 4.6 figs. 10-12).

- :mod:`moirae.rules.book`: :class:`RuleBook`, an engine's suppress / escalate / join rules;
- :mod:`moirae.rules.norm`: the norm judge (revision-aware filters over a norm Recall);
- :mod:`moirae.rules.gate`: what keeps a suppressed alert out of the incident store;
- :mod:`moirae.rules.join`: a Recall's output joined with a live stream;
- :mod:`moirae.rules.store`: alert dispositions and their changes, persisted;
- :mod:`moirae.rules.reference`: reference tables loaded from CSV or SQL.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "RuleBook": "moirae.rules.book",
    "combine": "moirae.rules.book",
    "RuleError": "moirae.rules.errors",
    "JoinRule": "moirae.rules.join",
    "NormRule": "moirae.rules.norm",
    "Verdict": "moirae.rules.norm",
    "DispositionStore": "moirae.rules.store",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
