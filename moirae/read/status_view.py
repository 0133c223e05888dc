"""Text rendering of the archive status (for `moirae archive status` and `moirae run`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

_NUMERIC = ("interval", "present", "recent", "old", "rows", "late", "dead")


def render_status(status: dict[str, Any]) -> str:
    """A plain-text table whose columns are as wide as their widest cell (a long stream
    name widens its column instead of pushing the rest out of line)."""
    span = status["chunk_span_seconds"]
    lines = [f"Archive: default chunk interval {span:g}s, R = {status['recent_chunks']} recent chunks, "
             f"{status['present_cache_rows']:,} present rows in memory"]
    body = []
    for name, s in sorted(status["streams"].items()):
        c = s["chunks"]
        body.append([name, _interval(s.get("chunk_interval_seconds")), f"{c['present']:,}", f"{c['recent']:,}",
                     f"{c['old']:,}", f"{s['rows']:,}", f"{s['late_rows']:,}", f"{s.get('dead_letters', 0):,}"])
    header = ["stream", *_NUMERIC]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    lines += [line(header), "-" * len(line(header))]
    lines += [line(row) for row in body]
    if not status["streams"]:
        lines.append("(no streams archived yet)")
    t = status["totals"]
    lines.append(f"total: {t['rows']:,} rows, {t['late_rows']:,} late, {t['dead_letters']:,} dead letters")
    lines += _database_lines(status.get("database"))
    return "\n".join(lines)


def _interval(seconds: float | None) -> str:
    """``1h``, ``7d``, ``90s``: the largest unit that divides the interval."""
    if seconds is None:
        return "-"
    total = timedelta(seconds=seconds)
    for unit, size in (("d", timedelta(days=1)), ("h", timedelta(hours=1)), ("m", timedelta(minutes=1))):
        if total >= size and total % size == timedelta(0):
            return f"{total // size}{unit}"
    return f"{seconds:g}s"


def _database_lines(db: dict[str, Any] | None) -> list[str]:
    """PostgreSQL outages the engine rode through (retried with backoff), newest first."""
    if not db:
        return []
    lines = []
    if db.get("current"):
        c = db["current"]
        lines.append(f"PostgreSQL: DOWN since {c['start']} ({c['retries']} retries, last error: {c.get('last_error')})")
    outages = db.get("outages") or []
    if outages:
        lines.append(f"PostgreSQL outages: {len(outages)} recorded, newest first")
        lines += [f"  {o['start']} .. {o['end']}: {o['retries']} retries during {o['during']}" for o in outages[:5]]
    return lines
