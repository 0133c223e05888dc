"""Helpers for the Ananke tests: times and replayable file streams (one file per micro-batch)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime


def at(hh: int, mm: int, ss: int = 0, us: int = 0) -> datetime:
    """2024-01-01 hh:mm:ss.us UTC."""
    return datetime(2024, 1, 1, hh, mm, ss, us, tzinfo=UTC)


def write_batches(directory, batches: list[list[dict]]) -> None:
    """One JSON-lines file per batch, with increasing mtimes so Spark reads them in order."""
    os.makedirs(directory, exist_ok=True)
    base = 1_700_000_000
    for i, rows in enumerate(batches):
        path = os.path.join(directory, f"batch-{i:04d}.json")
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps({k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.items()}) + "\n")
        os.utime(path, (base + i * 10, base + i * 10))
