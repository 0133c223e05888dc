"""The engine: ``from moirae import Engine`` (or ``from moirae.engine import Engine``).

- :mod:`~moirae.engine.engine`: :class:`Engine`, the composition root the fronts use.
- :mod:`~moirae.engine.maintenance`: :class:`Maintenance`, expiry horizons, demotion, ageing.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "Engine": "moirae.engine.engine",
    "EngineError": "moirae.runtime.errors",
    "Maintenance": "moirae.engine.maintenance",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
