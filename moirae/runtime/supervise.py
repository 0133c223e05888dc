"""Live queries stopped by a full data directory, paused and resumed.

Every live streaming query writes its checkpoint (offsets, commits, state store) under
the engine's data directory, and Spark's temporary files go there too. When a write
fails for lack of space, Spark stops the query with an error whose chain ends in
``No space left on device`` (ENOSPC). :class:`Supervisor` tells that failure from
others, reports it once, in one line naming the data directory and that it is full (the
Java details stay in the Spark log file), and restarts the query from its checkpoint
once the file system has room again (``min_free`` bytes), checked every
``interval`` seconds by the engine's supervisor thread.

Nothing is lost or duplicated by the restart: the query replays its last uncommitted
batch, which the Archiver's batch log (exactly-once appends, docs/ARCHITECTURE.md 3.1), the
event log (one row per eid) and ANK-1's batch ids make a no-op where it was already
done. Spark writes each checkpoint file to a temporary name and renames it when
complete, so a write cut short leaves a stray temporary file, never a corrupt
checkpoint. Failures of any other kind are kept in :attr:`Supervisor.failures` for the
caller (``Engine.run_for`` raises those of the source queries, as before).
"""

from __future__ import annotations

import errno
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("moirae.runtime.supervise")

DISK_FULL = ("No space left on device", "Disk quota exceeded")
MIN_FREE = 1 << 20
# "Name: message" or a bare "Name", as a Python traceback ends, as a Java chain's "Caused
# by:" lines read, and as Py4J introduces a Java error (": org.apache...Exception: ...")
_ERROR_LINE = re.compile(r"^\s*(?::\s*)?(?:Caused by: )?([\w.$]+(?:Error|Exception))(?:: ?(.*))?$")


def root_cause(exc: BaseException | str) -> str:
    """The one line that says what went wrong in a (Spark) error: its last
    ``SomeError: message`` line (a Python traceback's own exception, a Java chain's
    root cause), else its first line.

    >>> root_cause("An exception was raised by the Python Proxy. Return Message: Traceback ...\\n"
    ...            "  File \\"x.py\\", line 1\\nValueError: bad row 7")
    'ValueError: bad row 7'
    >>> root_cause("Query failed\\nCaused by: java.io.IOException: No space left on device\\n\\tat a.b(C.java:1)")
    'java.io.IOException: No space left on device'
    >>> root_cause("Traceback ...\\npy4j.protocol.Py4JJavaError: An error occurred while calling o8.collectToPython.\\n"
    ...            ": org.apache.spark.SparkException: Job aborted\\n\\tat a.b(C.java:1)\\n"
    ...            "Caused by: java.io.OptionalDataException\\n\\tat d.e(F.java:2)")
    'java.io.OptionalDataException'
    """
    lines = [ln for ln in f"{exc}".splitlines() if ln.strip()]
    found = [m for m in map(_ERROR_LINE.match, lines) if m]
    if found:
        name, msg = found[-1].groups()
        return f"{name}: {msg}".strip()[:500] if msg else name
    return (lines[0].strip() if lines else type(exc).__name__)[:500]


def is_disk_full(exc: BaseException | str | None) -> bool:
    """True when an error (Python, or a Spark/Java one as text) says the disk is full.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    >>> is_disk_full("Caused by: java.io.IOException: No space left on device")
    True
    >>> is_disk_full(ValueError("bad row"))
    False
    """
    if exc is None:
        return False
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = exc if isinstance(exc, str) else f"{exc}"
    return any(marker in text for marker in DISK_FULL)


@dataclass(frozen=True)
class LiveQuery:
    """One live streaming query the supervisor watches: its current Spark query (or
    None), its checkpoint, and how to start it again from that checkpoint."""

    name: str
    query: Any
    checkpoint: Path
    restart: Callable[[], Any]


@dataclass
class Pause:
    name: str
    checkpoint: str
    since: float
    error: str
    attempts: int = 0


@dataclass
class Supervisor:
    """Pauses live queries a full data directory stopped, and resumes them (see the
    module docstring). ``queries`` lists the engine's live queries now; ``clock`` is
    monotonic seconds."""

    data_dir: Path
    queries: Callable[[], list[LiveQuery]]
    min_free: int = MIN_FREE
    clock: Callable[[], float] = time.monotonic
    paused: dict[str, Pause] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def free_bytes(self) -> int:
        try:
            return shutil.disk_usage(self.data_dir).free
        except OSError:
            return 0

    def check(self) -> dict[str, str]:
        """Pause newly failed queries the disk stopped, resume paused ones where the
        disk has room again; return the failures of any other kind (query -> error)."""
        with self._lock:
            for q in self.queries():
                if q.name in self.paused or q.name in self.failures or q.query is None:
                    continue
                try:
                    if q.query.isActive:
                        continue
                    exc = q.query.exception()
                except Exception as err:  # the JVM side is gone (engine stopping): not ours to judge
                    log.debug("supervisor: cannot read the state of %s: %s", q.name, err)
                    continue
                if exc is None:
                    continue  # stopped on purpose
                if is_disk_full(exc):
                    self._pause(q, exc)
                else:
                    self.failures[q.name] = root_cause(exc)
                    log.error("live query %s failed: %s", q.name, self.failures[q.name])
            if self.paused:
                self._resume({q.name: q for q in self.queries()})
            return dict(self.failures)

    def _pause(self, q: LiveQuery, exc: BaseException) -> None:
        self.paused[q.name] = Pause(q.name, str(q.checkpoint), self.clock(), root_cause(exc))
        log.warning("the data directory %s is full (No space left on device): live query %s stopped; it resumes "
                    "from its checkpoint %s when space returns (%d bytes free now)",
                    self.data_dir, q.name, q.checkpoint, self.free_bytes())

    def _resume(self, live: dict[str, LiveQuery]) -> None:
        free = self.free_bytes()
        if free < self.min_free:
            return
        for name, pause in list(self.paused.items()):
            q = live.get(name)
            if q is None:  # no longer deployed (the engine stopped it)
                del self.paused[name]
                continue
            pause.attempts += 1
            try:
                q.restart()
            except Exception as exc:
                if is_disk_full(exc):
                    continue  # still no room after all: try again next round
                self.failures[name] = f"restart after the disk was full failed: {type(exc).__name__}: {exc}"[:500]
                del self.paused[name]
                log.error("live query %s: %s", name, self.failures[name])
                continue
            del self.paused[name]
            paused_s = self.clock() - pause.since
            self.history.append({"query": name, "paused_s": round(paused_s, 3), "attempts": pause.attempts})
            log.warning("the data directory %s has room again (%d bytes free): live query %s resumed from its "
                        "checkpoint after %.1f s", self.data_dir, free, name, paused_s)

    def forget(self, names) -> None:
        """Forget the paused and failed queries ``names`` (retired with their monitor)."""
        with self._lock:
            for name in names:
                self.paused.pop(name, None)
                self.failures.pop(name, None)

    def reset(self) -> None:
        """Forget paused and failed queries (the engine stopped them); keep the history."""
        with self._lock:
            self.paused.clear()
            self.failures.clear()

    def status(self) -> dict[str, Any]:
        with self._lock:
            now = self.clock()
            return {"data_dir": str(self.data_dir), "free_bytes": self.free_bytes(),
                    "paused": [{"query": p.name, "checkpoint": p.checkpoint, "paused_s": round(now - p.since, 3),
                                "error": p.error} for p in self.paused.values()],
                    "resumed": list(self.history), "failed": dict(self.failures)}
