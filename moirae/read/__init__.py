"""What the fronts read of an engine.

- :mod:`moirae.read.abc`: :class:`EngineSurface`, the one surface the fronts call (read
  and steer), implemented by :class:`moirae.Engine` and :class:`ReadOnlyEngine`;
- :mod:`moirae.read.readonly`: :class:`ReadOnlyEngine`, that surface over the database
  of an engine running elsewhere (``moirae console``);
- :mod:`moirae.read.views`, :mod:`moirae.read.incident_views`: JSON views for the API
  and the console; :mod:`moirae.read.status_view`: the archive status as text;
- :mod:`moirae.read.archive_view`: the archive reads behind them.
"""

from moirae.base.lazy import lazy_exports
from moirae.read.abc import EngineSurface, ReadSurface, SteerSurface
from moirae.read.errors import EngineNotRunning

#: loaded on first use: it imports the archive, the event log and the incident store
_WHERE = {"ReadOnlyEngine": "moirae.read.readonly", "DbTail": "moirae.read.readonly"}
__all__ = ["EngineNotRunning", "EngineSurface", "ReadSurface", "SteerSurface", *sorted(_WHERE)]
__getattr__ = lazy_exports(__name__, _WHERE)
