"""Rate limits on mutating calls: a token bucket per client.

Each client (``actor@address``) may make :data:`BURST` changes at once and
:data:`PER_SECOND` a second after that; beyond, :meth:`RateLimiter.take` says how long to
wait and the API answers 429 with ``Retry-After``. A cancel storm belongs in one call
(``POST /api/events/cancel``), which counts once.

>>> r = RateLimiter(per_second=1, burst=2, clock=iter([0.0, 0.0, 0.0, 1.0]).__next__)
>>> r.take("a"), r.take("a"), r.take("a") is not None, r.take("a")
(None, None, True, None)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

PER_SECOND = 20.0
BURST = 200
MAX_CLIENTS = 10_000


class RateLimiter:
    def __init__(self, per_second: float = PER_SECOND, burst: int = BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)

    def take(self, client: str) -> float | None:
        """Spend one change of ``client``: None if allowed, else the seconds to wait."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.per_second)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / self.per_second
            if len(self._buckets) >= MAX_CLIENTS and client not in self._buckets:
                self._buckets.clear()  # a flood of addresses: forget rather than grow
            self._buckets[client] = (tokens - 1.0, now)
            return None
