"""The ``maritime`` scenario (the trajectory paper's application, T 5.2) on an engine.

It deploys the monitor files of ``config/monitors/maritime`` (one per behaviour of T
Defs. 5.10-5.16: a ``MATCH_RECOGNIZE`` pattern event-query over the vessel traffic of the
``maritime`` source kind, the vessel's context, its recent track as a Recall, and
Similarity Recall over past episodes). All of them share the one ``vessels`` source.

``behaviours`` deploys only those files; ``source_options`` overrides the ``vessels``
source's options in every file (e.g. a small, fast replay for a test).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from moirae.engine.engine import Engine

MONITORS = Path(__file__).resolve().parents[2] / "config" / "monitors" / "maritime"


def monitor_texts(behaviours: Iterable[str] | None = None, source_options: Mapping[str, Any] | None = None,
                  folder: Path = MONITORS) -> list[tuple[Path, str]]:
    """``(file, text)`` of the scenario's monitor files (only ``behaviours`` when given),
    with the ``vessels`` source's options updated by ``source_options``."""
    files = sorted(folder.glob("*.yaml"))
    if behaviours is not None:
        wanted = set(behaviours)
        unknown = wanted - {f.stem for f in files}
        if unknown:
            raise ValueError(f"no maritime monitor for {', '.join(sorted(unknown))} in {folder}")
        files = [f for f in files if f.stem in wanted]
    out = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        if source_options:
            spec = yaml.safe_load(text)
            spec["sources"]["vessels"]["options"].update(source_options)
            text = yaml.safe_dump(spec, sort_keys=False)
        out.append((f, text))
    return out


def deploy(engine: Engine, live: bool = True, progress: bool = True, materialize: bool = True,
           behaviours: Iterable[str] | None = None, source_options: Mapping[str, Any] | None = None) -> dict:
    """Deploy the scenario's monitors on ``engine``; returns its summary."""
    deployed = []
    for f, text in monitor_texts(behaviours, source_options):
        out = engine.deploy_text(text, origin=str(f))
        deployed.append(out["name"])
    return {"scenario": "maritime", "monitors": deployed, "folder": str(MONITORS)}
