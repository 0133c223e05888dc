"""Materializing the history of intermediate streams (M 4.2-4.3): the event- and
context-query functions run unchanged in Spark batch mode over archived chunks.

- :mod:`~moirae.materialize.replica`: materializing units, ``rematerialize``, the replica operator.
- :mod:`~moirae.materialize.unit_inputs`: what a unit was computed from, so unchanged units are skipped;
  which units are being materialized now (claims).
- :mod:`~moirae.materialize.replica2`: raw history re-processed on demand for recall tasks (replica2).
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "rematerialize": "moirae.materialize.replica",
    "materialize_range": "moirae.materialize.replica",
    "ReplicaOperator": "moirae.materialize.replica",
    "UnitLedger": "moirae.materialize.unit_inputs",
    "UnitClaims": "moirae.materialize.unit_inputs",
    "RawHistory": "moirae.materialize.replica2",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
