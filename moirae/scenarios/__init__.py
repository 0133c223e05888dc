"""Built-in scenarios for ``moirae run``: each registers its sources and deploys the
paper's example queries on an engine (``deploy(engine, live=...)``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moirae.engine.engine import Engine

SCENARIOS = {"cluster": "moirae.scenarios.cluster", "host": "moirae.scenarios.host",
             "maritime": "moirae.scenarios.maritime"}


def deploy(name: str, engine: Engine, live: bool = True, progress: bool = True, materialize: bool = True):
    """Register the scenario's sources and queries on ``engine``; returns its summary.
    ``materialize`` re-creates the history of its event-queries first (resumable)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    return import_module(SCENARIOS[name]).deploy(engine, live=live, progress=progress, materialize=materialize)
