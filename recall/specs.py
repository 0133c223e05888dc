"""Frozen specs of the standard recall operators (:mod:`recall.abc`), in one place.

A spec is what is deployed: plain, frozen, comparable values. ``spec.build(store)`` makes
the operator logic the Recall Manager drives, on the chunk store its history-queries are
prepared against; services the logic calls (a resolution lookup) are given to ``build``,
not kept in the spec. The logic keeps its spec as ``op.spec``. Each spec is defined
beside the logic it builds (as a Bytewax ``Clock`` beside its ``ClockLogic``).

>>> spec = RecallSpec("n", "SELECT h.sid, count(*) AS n FROM history h GROUP BY h.sid HAVING h.sid = e.sid")
>>> op = spec.build()
>>> op.name, op.spec == spec, spec == RecallSpec(spec.name, spec.sql)
('n', True, True)
"""

from recall.operator import RecallSpec
from recall.similarity_recall import NoveltySpec, SimilarityRecallSpec

__all__ = ["NoveltySpec", "RecallSpec", "SimilarityRecallSpec"]
