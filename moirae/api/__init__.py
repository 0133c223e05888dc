"""The HTTP API and the console (DESIGN.md §1 "Alert consoles", §5).

``create_app(engine)`` builds the FastAPI application; ``serve(engine, host, port)``
runs it in a background thread and returns an :class:`ApiServer` (``url``, ``stop()``).
``ReadOnlyEngine`` is a view over the database of an engine not running here (for
``moirae console``).
"""

from moirae.api.app import create_app
from moirae.api.auth import ApiError
from moirae.api.readonly import ReadOnlyEngine
from moirae.api.server import ApiServer, serve

__all__ = ["ApiError", "ApiServer", "ReadOnlyEngine", "create_app", "serve"]
