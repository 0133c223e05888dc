"""Moirae: history-enhanced monitoring on Spark Structured Streaming and PostgreSQL.

``Engine`` is imported lazily, so the CLI's ``--help`` does not pay for pandas,
pyarrow and psycopg2.
"""

from moirae.base.errors import MoiraeError

__all__ = ["Engine", "EngineError", "MoiraeError"]


def __getattr__(name: str):
    if name in ("Engine", "EngineError"):
        from moirae.engine import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'moirae' has no attribute {name!r}")
