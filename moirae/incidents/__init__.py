"""Incidents (M 3.3): consecutive events of one key, persisted in PostgreSQL, with their
resolution notes.

- :mod:`~moirae.incidents.store`: :class:`IncidentStore` and the incident errors.
- :mod:`~moirae.incidents.resolution_cache`: resolution notes as Similarity Recall asks for them.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "IncidentStore": "moirae.incidents.store",
    "IncidentConfig": "moirae.incidents.store",
    "IncidentError": "moirae.incidents.store",
    "NoSuchIncident": "moirae.incidents.store",
    "ResolutionCache": "moirae.incidents.resolution_cache",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
