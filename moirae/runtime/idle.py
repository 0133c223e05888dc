"""Whether a streaming query's source had nothing new at a trigger tick.

An event's context must see every context input up to the event's time, so the engine
waits for its inputs' archives (:meth:`moirae.ingest.archive_waits.ArchiveWaits.wait`). A source whose
offsets advance with time (the scenario's, Spark's ``rate``) shows it is caught up with
an empty micro-batch. A source whose offsets stand still when it has nothing new (Kafka,
files, a bounded replay at its end) runs no batch at all, so every wait for it would
last the whole timeout. For a source declared *sparse* (it never lags the other inputs:
a trigger that finds nothing new means nothing more exists up to that instant), the
engine asks Spark instead: :func:`idle_tick` reads the archive query's status and last
progress.
"""

from __future__ import annotations

from datetime import datetime


def idle_tick(query, started: float, interval_s: float, now: float, slack_s: float) -> float | None:
    """The latest trigger tick (epoch seconds) at which ``query`` is known to have
    found no new data, or None.

    Spark runs a processing-time query's triggers on wall-clock multiples of the
    interval. When its status says no trigger is running and the last one found no new
    data (``isDataAvailable`` false), every tick after the end of its last batch (the
    last progress' start plus its ``triggerExecution``; ``started``, the query's start,
    if it has none) up to ``now - slack`` had a trigger that found nothing: one that
    found data would have left a newer progress, or be running now. ``slack`` allows
    for a trigger thread that wakes late. The last progress is read before and after
    the status, so a batch ending in between is not missed.

    The tick is returned half a millisecond after its exact instant, so flooring it to
    milliseconds gives the tick itself despite floating point.
    """
    before = query.lastProgress
    status = query.status
    after = query.lastProgress
    if status.get("isTriggerActive") or status.get("isDataAvailable"):
        return None
    if _key(before) != _key(after):
        return None
    end = max(started, _batch_end(after))
    tick = (tick_ms(now - slack_s, interval_s) + 0.5) / 1000
    return tick if tick > end else None


def tick_ms(wall: float, interval_s: float) -> int:
    """The trigger tick (epoch ms, a multiple of the interval) that the instant ``wall``
    (epoch s) falls in.

    >>> tick_ms(1.2345, 0.1)
    1200
    """
    ms = max(1, round(interval_s * 1000))
    return int(wall * 1000) // ms * ms


def _key(progress) -> tuple | None:
    return None if progress is None else (progress.get("batchId"), progress.get("timestamp"))


def _batch_end(progress) -> float:
    """When the batch of a progress report ended (epoch s); -inf for none.

    >>> _batch_end({"timestamp": "2024-01-01T00:00:01.250Z", "durationMs": {"triggerExecution": 500}})
    1704067201.75
    >>> _batch_end(None)
    -inf
    """
    if progress is None:
        return float("-inf")
    began = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return began + (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
