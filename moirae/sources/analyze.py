"""Out-of-order analysis of a stream in delivery order (DEBS'19 §2.1, §2.4).

A tuple is out of order when its event time is below the running maximum of the event
times delivered before it; its delay is that gap. The analysis gives the out-of-order
fraction, the maximum delay, a delay histogram of the out-of-order tuples and the event
rate (tuples per event-time second).

>>> import numpy as np
>>> s = analyze(np.array([0, 2, 1, 3, 4], dtype="int64") * 1_000_000)
>>> s.out_of_order_pct, s.max_delay_ms
(20.0, 1.0)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class StreamStats:
    """Out-of-order statistics of one stream (all delays in milliseconds)."""

    rows: int
    out_of_order: int
    out_of_order_pct: float
    max_delay_ms: float
    mean_delay_ms: float
    histogram_edges_ms: tuple[float, ...]
    histogram_counts: tuple[int, ...]
    event_rate_per_s: float
    first_event_ns: int | None
    last_event_ns: int | None

    def to_json(self) -> str:
        """The statistics as a JSON object (stable key order)."""
        return json.dumps(asdict(self), sort_keys=True)

    def to_text(self) -> str:
        """A short human-readable report."""
        lines = [
            f"rows                {self.rows}",
            f"out of order        {self.out_of_order} ({self.out_of_order_pct:.2f} %)",
            f"max delay           {self.max_delay_ms:.3f} ms",
            f"mean delay (o-o-o)  {self.mean_delay_ms:.3f} ms",
            f"event rate          {self.event_rate_per_s:.3f} tuples/s",
            "delay histogram (ms):",
        ]
        edges, counts = self.histogram_edges_ms, self.histogram_counts
        for i, count in enumerate(counts):
            lines.append(f"  [{edges[i]:10.3f}, {edges[i + 1]:10.3f})  {count}")
        return "\n".join(lines)


def analyze(event_ns_in_delivery_order: np.ndarray, bins: int = 10) -> StreamStats:
    """Analyse event times given in the order the stream delivers them."""
    ev = np.asarray(event_ns_in_delivery_order, dtype="int64")
    n = len(ev)
    if n == 0:
        return StreamStats(0, 0, 0.0, 0.0, 0.0, (0.0, 0.0), (0,), 0.0, None, None)
    prev_max = np.empty(n, dtype="int64")
    prev_max[0] = ev[0]
    if n > 1:
        prev_max[1:] = np.maximum.accumulate(ev[:-1])
    gap_ms = (prev_max - ev).astype("float64") / NS_PER_MS
    late = gap_ms > 0
    delays = gap_ms[late]
    if len(delays):
        counts, edges = np.histogram(delays, bins=bins)
    else:
        counts, edges = np.zeros(1, dtype="int64"), np.zeros(2)
    first, last = int(ev.min()), int(ev.max())
    span_s = (last - first) / 1e9
    rate = float(n / span_s) if span_s > 0 else 0.0
    return StreamStats(
        rows=n,
        out_of_order=int(late.sum()),
        out_of_order_pct=float(100.0 * late.sum() / n),
        max_delay_ms=float(delays.max()) if len(delays) else 0.0,
        mean_delay_ms=float(delays.mean()) if len(delays) else 0.0,
        histogram_edges_ms=tuple(float(e) for e in edges),
        histogram_counts=tuple(int(c) for c in counts),
        event_rate_per_s=rate,
        first_event_ns=first,
        last_event_ns=last,
    )
