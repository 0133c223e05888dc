"""History work yields the CPU to the live path.

The threads that do history work (the Recall Manager's workers, the results writer,
the similarity index builder) lower their own OS scheduling priority to a niceness
``nice`` when they start. When the machine is saturated, the live path (Spark's
streaming queries, the archive, the event-query's batch thread, the event worker) then
gets the cores first, and history improves in what is left; when it is not saturated,
nothing changes. Moirae runs its materialization replicas "with lower priority than
other operators" (M 4.2) and its lower-priority recall tasks "only when the system is
lightly-loaded" (M 4.4); this applies the same rule between the live queries and all
history work. The kernel's fair scheduler never starves a niced thread: at niceness 10
it still gets about a tenth of a core that the live path also wants.

Only Linux gives each thread its own niceness (setpriority(2), "a per-thread attribute"
under NPTL), so elsewhere this does nothing: there the call would renice the whole
process, or another process whose pid equals the thread id.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

MAX_NICE = 19


def check_nice(nice: int) -> int:
    """``nice`` if it is a niceness history work may take (0-19), else a ValueError
    naming it (raised where the thread is configured, never inside it).

    >>> check_nice(10)
    10
    >>> check_nice(20)
    Traceback (most recent call last):
    ...
    ValueError: nice must be an integer from 0 to 19, got 20
    """
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice must be an integer from 0 to {MAX_NICE}, got {nice!r}")
    return nice


def lower_thread_priority(nice: int) -> int | None:
    """Lower the calling thread's priority to niceness ``nice`` (never raise it: a
    thread already nicer keeps its value). Returns the thread's niceness after the
    call, or None where threads have no niceness of their own (not Linux) or ``nice``
    is 0 (history as the live path)."""
    check_nice(nice)
    if nice == 0 or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        if now < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as exc:  # a sandbox without setpriority: history runs as the live path
        log.warning("history work keeps the live path's CPU priority: setpriority(%d) failed: %s", nice, exc)
        return None


def thread_nice(native_id: int) -> int | None:
    """The niceness of a thread of this process (Linux; None elsewhere or if gone)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, native_id)
    except OSError:
        return None
