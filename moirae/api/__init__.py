"""The HTTP API and the console (DESIGN.md §1 "Alert consoles", §5).

``create_app(engine)`` builds the FastAPI application; ``serve(engine, host, port)``
runs it in a background thread and returns an :class:`ApiServer` (``url``, ``stop()``).
``ReadOnlyEngine`` is a view over the database of an engine not running here (for
``moirae console``). Names are imported lazily, so the steering commands (which only
need :mod:`moirae.api.client`) do not load FastAPI.
"""

from importlib import import_module

_WHERE = {"create_app": "moirae.api.app", "ApiError": "moirae.api.auth", "ReadOnlyEngine": "moirae.api.readonly",
          "ApiServer": "moirae.api.server", "serve": "moirae.api.server"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'moirae.api' has no attribute {name!r}")
