"""Stopping a streaming query between its micro-batches.

``StreamingQuery.stop()`` interrupts the query's thread wherever it is. Stopped inside a
micro-batch, the batch's work is thrown away (it is replayed from the checkpoint at the
next start, so nothing is lost or doubled), and Spark logs errors about the
half-done work: Arrow's "Memory was leaked by query" when a ``foreachBatch`` was taking
the batch to Python (``toArrow``), a failed broadcast store. Every ``Engine.stop`` did
that to whichever query was busy. :func:`stop_between_batches` waits, up to a grace
period, until no trigger is running, and stops the query then.

Spark has no call to stop a query after its current batch, so a trigger can still begin
in the instant between the status read and the stop: the grace makes a mid-batch stop
rare, never impossible, and the checkpoint keeps even that one harmless.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


def stop_between_batches(query, grace_s: float, poll_s: float = 0.02) -> bool:
    """Stop ``query`` once no trigger is running, waiting at most ``grace_s`` seconds;
    True if it stopped between batches, False if a batch was still running at the end of
    the grace (it is then stopped anyway, and the batch replays at the next start). A
    query already stopped, or whose status cannot be read (its session gone), is
    stopped at once."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            idle = not query.isActive or not query.status.get("isTriggerActive")
        except Exception:  # noqa: BLE001 - the JVM side is gone: nothing to wait for
            idle = True
        if idle or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    if not idle:
        log.warning("moirae: stopping query %r in the middle of a micro-batch after %.1f s of grace; "
                    "the batch replays from its checkpoint at the next start", query.name, grace_s)
    query.stop()
    return idle
