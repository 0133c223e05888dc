"""Moirae: history-enhanced monitoring on Spark Structured Streaming and PostgreSQL."""

from moirae.engine import Engine, EngineError
from scheduler.errors import MoiraeError

__all__ = ["Engine", "EngineError", "MoiraeError"]
