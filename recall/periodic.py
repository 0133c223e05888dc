"""The Recall Manager's periodic work, on APScheduler 3 (a ``BackgroundScheduler``).

Two interval jobs (docs/ARCHITECTURE.md):

- ``feedback``: :meth:`RecallManager.expire_feedback` every ``feedback_every`` seconds,
  discarding the tasks of events whose feedback deadline has passed (M 4.4). The job
  only *triggers* the check; the deadline itself is decided by the manager's injected
  clock, so tests move a ``ManualClock`` to the exact boundary.
- ``cleanup``: :meth:`RecallManager.reap` every ``cleanup_every`` seconds, dropping the
  statistics of tasks that ended more than the manager's ``retention`` ago.

Jobs never overlap themselves (``max_instances=1``, ``coalesce=True``): a slow check is
not queued up behind itself. A failing job is logged by APScheduler and retried at the
next interval.
"""

from __future__ import annotations

import logging
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)


class PeriodicJobs:
    """Start with :meth:`start`, stop with :meth:`shutdown` (waits for a running job)."""

    def __init__(self, manager: Any, *, feedback_every: float = 1.0, cleanup_every: float = 30.0) -> None:
        for key, value in (("feedback_every", feedback_every), ("cleanup_every", cleanup_every)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"recall periodic {key} must be a number of seconds > 0, got {value!r}")
        self.manager = manager
        self.runs = {"feedback": 0, "cleanup": 0}
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(2)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )
        self.scheduler.add_job(self._feedback, "interval", seconds=feedback_every, id="recall-feedback",
                               name="recall: discard tasks past their feedback deadline")
        self.scheduler.add_job(self._cleanup, "interval", seconds=cleanup_every, id="recall-cleanup",
                               name="recall: forget ended tasks after the retention period")

    def _feedback(self) -> list[str]:
        discarded = self.manager.expire_feedback()
        self.runs["feedback"] += 1
        if discarded:
            log.info("feedback deadline passed: discarded recall tasks %s", discarded)
        return discarded

    def _cleanup(self) -> int:
        n = self.manager.reap()
        self.runs["cleanup"] += 1
        return n

    def start(self) -> PeriodicJobs:
        self.scheduler.start()
        return self

    @property
    def running(self) -> bool:
        return bool(self.scheduler.running)

    def shutdown(self, wait: bool = True) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)

    def __enter__(self) -> PeriodicJobs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
