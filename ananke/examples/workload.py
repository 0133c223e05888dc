"""Writing generated workloads as replayable file streams (one file per micro-batch)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime


def write_files(rows: Sequence[dict], directory: str | os.PathLike, rows_per_file: int,
                start_mtime: int = 1_700_000_000) -> int:
    """Write ``rows`` as JSON lines, ``rows_per_file`` per file, with increasing mtimes so
    Spark's file source (``maxFilesPerTrigger``) reads them in order. Returns the file count."""
    os.makedirs(directory, exist_ok=True)
    n = 0
    for n, start in enumerate(range(0, len(rows), rows_per_file), start=1):
        path = os.path.join(directory, f"part-{n:05d}.json")
        with open(path, "w") as f:
            f.writelines(_line(r) for r in rows[start:start + rows_per_file])
        os.utime(path, (start_mtime + n, start_mtime + n))
    return n


def _line(row: dict) -> str:
    return json.dumps({k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}) + "\n"


def flush_rows(template: dict, ts: Iterable[datetime]) -> list[dict]:
    """Rows copying ``template`` at times ``ts``: appended to a stream to move its watermark."""
    return [{**template, "ts": t} for t in ts]
