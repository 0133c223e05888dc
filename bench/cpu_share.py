"""Where a benchmark run's CPU goes, by process: the Spark JVM, PostgreSQL's server
processes, Spark's Python workers and the driver (this process).

:class:`CpuShare` samples every process once a second in a thread and sums each one's
user + system CPU time since the previous sample into its class, beside the machine's
own busy time (all cores). A process that starts and ends between two samples is not
seen (a short-lived PostgreSQL backend, say), and one that starts between samples is
counted whole from its first: the machine's busy time minus the sum of the classes is
reported as ``other``, so nothing is hidden.

>>> classify("java", ["java", "-cp", "spark/jars/*", "org.apache.spark.deploy.SparkSubmit"], False)
'jvm'
>>> classify("postgres", ["postgres: moirae moirae [local] COPY"], False)
'postgres'
>>> classify("python3.11", ["python", "-m", "pyspark.daemon"], False)
'python_workers'
>>> classify("python3.11", ["python", "-m", "bench.engine_jvm"], True)
'driver'
>>> classify("bash", ["bash"], False) is None
True

:func:`jvm_threads` splits one JVM's CPU by its threads' names, so a run can show how
much of the JVM's time went to compiling (the JIT still warming up) rather than to
Spark's tasks:

>>> [thread_class(n) for n in ("C2 CompilerThre", "GC Thread#0", "Executor task launch worker for task 3.0")]
['jit', 'gc', 'tasks']
>>> thread_class("dag-scheduler-event-loop")
'other'
"""

from __future__ import annotations

import os
import threading
import time

import psutil

CLASSES = ("jvm", "postgres", "python_workers", "driver")


def classify(name: str, cmdline: list[str], is_self: bool) -> str | None:
    """The class of a process from its name and command line (None: not counted)."""
    if is_self:
        return "driver"
    if name.startswith("java"):
        return "jvm"
    if name.startswith("postgres") or (cmdline and cmdline[0].startswith("postgres")):
        return "postgres"
    if name.startswith("python") and any("pyspark" in part for part in cmdline):
        return "python_workers"
    return None


JVM_THREAD_CLASSES = ("tasks", "jit", "gc", "other")


def thread_class(name: str) -> str:
    """The class of a JVM thread from its name as ``/proc`` shows it (15 characters)."""
    if name.startswith(("C1 Compiler", "C2 Compiler")):
        return "jit"
    if name.startswith(("GC Thread", "G1 ", "VM Thread")):
        return "gc"
    if name.startswith("Executor task"):
        return "tasks"
    return "other"


def jvm_threads(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the threads of process ``pid``, per
    :func:`thread_class`. Threads that have ended are not counted, so compare two calls
    over a window in which the classes' threads live (Spark's task threads are pooled)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(JVM_THREAD_CLASSES, 0.0)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        out[thread_class(name)] += (int(fields[11]) + int(fields[12])) / tick
    return out


def postmaster_of(dsn: str) -> int | None:
    """The pid of the PostgreSQL server ``dsn`` reaches, when it runs on this machine
    (the parent of a backend of it), else None."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        return psutil.Process(backend).ppid()
    except psutil.Error:
        return None
    finally:
        conn.close()


class CpuShare:
    """CPU seconds per process class between :meth:`start` and :meth:`stop`.

    On a shared machine other sessions' Spark JVMs, Python workers and PostgreSQL
    servers run beside the measured one. With ``own`` only this process's descendants
    count as ``jvm`` and ``python_workers`` (its Spark JVM and that JVM's workers), and
    with ``postmaster`` only that server's processes as ``postgres``; the others'
    CPU then shows in ``other``."""

    def __init__(self, interval_s: float = 1.0, own: bool = False, postmaster: int | None = None) -> None:
        self.interval_s = interval_s
        self.own, self.postmaster = own, postmaster
        self._seconds = dict.fromkeys(CLASSES, 0.0)
        self._prev: dict[int, tuple[str, float]] = {}
        self._ignored: set[tuple[int, float | None]] = set()  # (pid, start time) of processes of no class
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._busy0 = 0.0
        self._since: float | None = None  # wall clock of start(): processes created later count whole

    def start(self) -> CpuShare:
        self._sample()  # the baseline of every process alive now
        self._t0, self._busy0, self._since = time.monotonic(), _busy(), time.time()
        self._thread = threading.Thread(target=self._loop, name="cpu-share", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Core-seconds per class, the machine's busy core-seconds, the wall seconds and
        the cores: ``{"seconds": .., "cores": .., "busy": .., "jvm": .., ..., "other": ..}``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        wall, busy = time.monotonic() - self._t0, _busy() - self._busy0
        out = {"seconds": round(wall, 1), "cores": psutil.cpu_count(), "busy": round(busy, 1),
               **{k: round(v, 1) for k, v in self._seconds.items()}}
        out["other"] = round(max(0.0, busy - sum(self._seconds.values())), 1)
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        # This thread runs in the measured driver and holds its GIL while it samples: a
        # process's name and command line (two more /proc reads) are read once, when it is
        # first seen, and a process of no class (another user's) is not read again
        me = os.getpid()
        for p in psutil.process_iter(["cpu_times", "create_time"]):
            try:
                info = p.info
                ident = (p.pid, info["create_time"])
                if ident in self._ignored:
                    continue
                times = info["cpu_times"]
                if times is None:
                    continue
                used = times.user + times.system
                known = self._prev.get(p.pid)
                cls = known[0] if known else self._scoped(p, classify(p.name() or "", p.cmdline() or [], p.pid == me))
            except (psutil.Error, TypeError):
                continue
            if cls is None:
                self._ignored.add(ident)
                continue
            if known is not None and used >= known[1]:
                self._seconds[cls] += used - known[1]
            elif known is None and self._since is not None and (info["create_time"] or 0) >= self._since:
                self._seconds[cls] += used  # born after start(): all of its time is in the window
            self._prev[p.pid] = (cls, used)


    def _scoped(self, p: psutil.Process, cls: str | None) -> str | None:
        """``cls``, or None for a process outside the measured run (class doc)."""
        if cls in ("jvm", "python_workers") and self.own:
            return cls if any(a.pid == os.getpid() for a in p.parents()) else None
        if cls == "postgres" and self.postmaster is not None:
            return cls if self.postmaster in (p.pid, p.ppid()) else None
        return cls


def _busy() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
