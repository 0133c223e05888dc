"""The Recall Manager's periodic jobs stop quietly: a shutdown racing a due job never
logs APScheduler's "Error submitting job" (``RuntimeError: cannot schedule new futures
after shutdown``), whatever the timing."""

from __future__ import annotations

import logging
import time

from recall.periodic import PeriodicJobs


class _Manager:
    def __init__(self) -> None:
        self.calls = 0

    def expire_feedback(self) -> list[str]:
        self.calls += 1
        return []

    def reap(self) -> int:
        return 0


def test_shutdown_racing_due_jobs_logs_nothing(caplog):
    caplog.set_level(logging.DEBUG)
    m = _Manager()
    for i in range(150):  # jobs due every 0.5 ms: each shutdown lands while a job is being submitted
        jobs = PeriodicJobs(m, feedback_every=0.0005, cleanup_every=0.0005).start()
        time.sleep(0.002 * (i % 4))
        jobs.shutdown()
        assert not jobs.running
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad[:3]]
    assert m.calls > 0  # the jobs did run


def test_jobs_run_again_after_a_stop():
    m = _Manager()
    jobs = PeriodicJobs(m, feedback_every=0.01, cleanup_every=30).start()
    time.sleep(0.1)
    jobs.shutdown()
    jobs.shutdown()  # idempotent
    before = m.calls
    time.sleep(0.05)
    assert m.calls == before  # stopped: nothing runs
    jobs.start()
    try:
        deadline = time.monotonic() + 5
        while m.calls == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.calls > before
    finally:
        jobs.shutdown()


EXIT_CHILD = """
import threading, time
from recall.periodic import PeriodicJobs

class M:
    def expire_feedback(self):
        return []

    def reap(self):
        return 0

PeriodicJobs(M(), feedback_every=0.01, cleanup_every=0.01).start()
time.sleep(0.1)
# a non-daemon thread keeps the interpreter exiting for a while (as Spark's do), with the
# thread pools' exit hook already run: a job submitted then would fail loudly
threading.Thread(target=time.sleep, args=(0.5,)).start()
"""


def test_a_process_exiting_with_the_jobs_running_exits_quietly():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EXIT_CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Error submitting job" not in done.stderr, done.stderr
