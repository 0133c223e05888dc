"""The HTTP API and the console, over an engine's :class:`~moirae.read.abc.EngineSurface`.

``create_app(engine)`` builds the FastAPI application; ``serve(engine, host, port)``
runs it in a background thread and returns an :class:`ApiServer` (``url``, ``stop()``).
``ReadOnlyEngine`` (from :mod:`moirae.read.readonly`) is that surface over the database
of an engine not running here (for ``moirae console``). Names are imported lazily, so the steering commands (which only
need :mod:`moirae.api.client`) do not load FastAPI.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {"create_app": "moirae.api.app", "ApiError": "moirae.api.auth", "ReadOnlyEngine": "moirae.read.readonly",
          "ApiServer": "moirae.api.server", "serve": "moirae.api.server"}

__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
