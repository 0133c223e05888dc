"""The query model (M 3): event-queries and context-queries as frozen descriptions, and
computing event contexts with them.

- :mod:`~moirae.queries.hybrid`: :class:`EventQuery`, :class:`ContextQuery`, stream names.
- :mod:`~moirae.queries.context`, :mod:`~moirae.queries.context_sql`: computing event contexts
  (M 3.3) with Spark functions or SQL text.
- :mod:`~moirae.queries.errors`: :class:`QueryDefinitionError`.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "ContextQuery": "moirae.queries.hybrid",
    "ContextRunner": "moirae.queries.context",
    "EventQuery": "moirae.queries.hybrid",
    "QueryDefinitionError": "moirae.queries.errors",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
