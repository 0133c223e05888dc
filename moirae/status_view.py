"""Text rendering of the archive status (for `moirae archive status` and `moirae run`)."""

from __future__ import annotations

from typing import Any


def render_status(status: dict[str, Any]) -> str:
    span = status["chunk_span_seconds"]
    lines = [f"Archive: chunk span {span:g}s, R = {status['recent_chunks']} recent chunks, "
             f"{status['present_cache_rows']:,} present rows in memory"]
    header = f"{'stream':<16} {'present':>8} {'recent':>8} {'old':>6} {'rows':>12} {'late':>8} {'dead':>6}"
    lines += [header, "-" * len(header)]
    for name, s in sorted(status["streams"].items()):
        c = s["chunks"]
        lines.append(f"{name:<16} {c['present']:>8} {c['recent']:>8} {c['old']:>6} {s['rows']:>12,} "
                     f"{s['late_rows']:>8,} {s.get('dead_letters', 0):>6,}")
    if not status["streams"]:
        lines.append("(no streams archived yet)")
    t = status["totals"]
    lines.append(f"total: {t['rows']:,} rows, {t['late_rows']:,} late, {t['dead_letters']:,} dead letters")
    return "\n".join(lines)
