"""The Deploy Manager (M 4.2-4.3): deploys hybrid queries on a running engine, computes
each new event's context and submits its recall tasks.

- :mod:`~moirae.deploy.manager`: :class:`DeployManager`.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "DeployManager": "moirae.deploy.manager",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
