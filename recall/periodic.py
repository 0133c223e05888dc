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

Stopping is quiet: :meth:`PeriodicJobs.shutdown` first pauses the scheduler and removes
its jobs (under the job store's lock, so a wake-up already choosing due jobs submits
them before, and every later one finds none), then shuts the executor down, waiting for
a job under way. In the other order a job falling due while the executor waited was
submitted to a closed pool: APScheduler's "Error submitting job" and a
``RuntimeError: cannot schedule new futures after shutdown`` traceback on stderr.
:meth:`PeriodicJobs.start` adds the jobs again, so a stopped engine starts again with them.
The engine stops these jobs in ``Engine.stop``, and a process that exits with them
running stops them before the thread pools' exit hook (``_before_pools_exit``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)


def _before_pools_exit(stop: Callable[..., None]) -> None:
    """Run ``stop(wait=False)`` when the interpreter exits, before the thread pools'
    own exit hook refuses new work: registered after :mod:`concurrent.futures`' hook,
    it runs before it (``threading`` calls these hooks in reverse order). A process that
    exits without stopping its engine then stops these jobs quietly too."""
    register = getattr(threading, "_register_atexit", None)  # what concurrent.futures itself uses
    if register is None:
        return
    try:
        register(lambda: stop(wait=False))
    except RuntimeError:  # the interpreter is already exiting
        pass


class PeriodicJobs:
    """Start with :meth:`start`, stop with :meth:`shutdown` (waits for a running job)."""

    def __init__(self, manager: Any, *, feedback_every: float = 1.0, cleanup_every: float = 30.0) -> None:
        for key, value in (("feedback_every", feedback_every), ("cleanup_every", cleanup_every)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"recall periodic {key} must be a number of seconds > 0, got {value!r}")
        self.manager = manager
        self.runs = {"feedback": 0, "cleanup": 0}
        self.every = {"feedback": float(feedback_every), "cleanup": float(cleanup_every)}
        self.scheduler: BackgroundScheduler | None = None

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
        """Start the jobs (a new scheduler each time: one shut down cannot run again)."""
        if self.running:
            return self
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(2)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )
        self.scheduler.add_job(self._feedback, "interval", seconds=self.every["feedback"], id="recall-feedback",
                               name="recall: discard tasks past their feedback deadline")
        self.scheduler.add_job(self._cleanup, "interval", seconds=self.every["cleanup"], id="recall-cleanup",
                               name="recall: forget ended tasks after the retention period")
        self.scheduler.start()
        _before_pools_exit(self.shutdown)
        return self

    @property
    def running(self) -> bool:
        return self.scheduler is not None and bool(self.scheduler.running)

    def shutdown(self, wait: bool = True) -> None:
        """Stop quietly (see the module docstring): no job is submitted once this
        begins; with ``wait``, a job under way finishes first. Idempotent."""
        if not self.running:
            return
        assert self.scheduler is not None
        self.scheduler.pause()
        self.scheduler.remove_all_jobs()
        self.scheduler.shutdown(wait=wait)

    def __enter__(self) -> PeriodicJobs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
