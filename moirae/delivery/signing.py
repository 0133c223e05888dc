"""HMAC signatures of webhook deliveries.

A signed request carries ``X-Moirae-Timestamp`` (Unix seconds) and
``X-Moirae-Signature: sha256=<hex>``, the HMAC-SHA256 under the target's ``secret`` of
``<timestamp>.<body>``. A receiver recomputes it (:func:`verify`) and refuses an old
timestamp, so a captured request cannot be replayed later.

>>> h = sign("s3cret", b'{"a":1}', 1700000000)
>>> verify("s3cret", b'{"a":1}', h["X-Moirae-Timestamp"], h["X-Moirae-Signature"], now=1700000010)
True
>>> verify("other", b'{"a":1}', h["X-Moirae-Timestamp"], h["X-Moirae-Signature"], now=1700000010)
False
"""

from __future__ import annotations

import hashlib
import hmac
import time


def sign(secret: str, body: bytes, ts: int | None = None) -> dict[str, str]:
    """The signature headers of ``body``."""
    ts = int(time.time()) if ts is None else int(ts)
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Moirae-Timestamp": str(ts), "X-Moirae-Signature": f"sha256={mac}"}


def verify(secret: str, body: bytes, timestamp: str | None, signature: str | None, tolerance: float = 300,
           now: float | None = None) -> bool:
    """Whether ``signature`` signs ``body`` at ``timestamp`` (within ``tolerance`` s of now)."""
    if not timestamp or not signature or not signature.startswith("sha256="):
        return False
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, body, ts)["X-Moirae-Signature"], signature)
