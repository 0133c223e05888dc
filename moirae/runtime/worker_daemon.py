"""Spark's Python worker daemon (``pyspark.daemon``) with two changes, for a local master
on a pip-installed PySpark. :func:`moirae.runtime.spark.spark_session` names it as
``spark.python.daemon.module``; it runs as ``python -m moirae.runtime.worker_daemon <worker
module>``, as Spark runs its own, so this module imports nothing but the standard
library before it hands over.

1. **Bytecode, not source.** Spark puts its copies of pyspark and py4j
   (``pyspark/python/lib/*.zip``) first on every worker's path. Python caches no
   bytecode for a module imported from a zip, so each new worker process compiled
   pyspark's modules from source again, a large share of the Python workers' time.
   When those zips are the installed
   pyspark package's own copies (the same release, byte for byte), they are moved behind
   site-packages, so the same modules come from their cached bytecode. (When Spark
   started the daemon through :mod:`moirae.runtime.python_launcher`, as a local session does
   unless the user set ``PYSPARK_PYTHON``, the zips are off the path already.)
2. **A collection walks only what is new.** A reused worker runs ``gc.collect()``
   after every task, a full collection over everything the worker holds: pyspark,
   pandas and pyarrow's modules and the engine's, some 100,000 objects, the largest
   single cost of a short task.
   After each task the worker now collects what that task left and freezes
   (``gc.freeze``) what survives, so the daemon's own collection that follows has
   nothing old to walk. Every :data:`FULL_EVERY` tasks the worker unfreezes and runs a
   full collection, so a cycle that became garbage after it was frozen (a cache entry
   dropped later, say) is reclaimed within that many tasks.
"""

from __future__ import annotations

import gc
import os
import sys

FULL_EVERY = 200  # tasks between full collections in one worker


def behind_site_packages(path: list[str]) -> list[str]:
    """``path`` with the zips of an installed pyspark (``<site>/pyspark/python/lib/*.zip``
    where ``<site>`` is itself on ``path``) moved to the end; anything else (a cluster's
    own ``SPARK_HOME`` zips, say) stays where it is.

    >>> site = "/v/lib/python3.11/site-packages"
    >>> behind_site_packages(["/app", site + "/pyspark/python/lib/pyspark.zip",
    ...                       site + "/pyspark/python/lib/py4j-0.10.9.9-src.zip", "/usr/lib/python311.zip", site])
    ['/app', '/usr/lib/python311.zip', '/v/lib/python3.11/site-packages', '/v/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip', '/v/lib/python3.11/site-packages/pyspark/python/lib/py4j-0.10.9.9-src.zip']
    >>> behind_site_packages(["/opt/spark/python/lib/pyspark.zip", site])
    ['/opt/spark/python/lib/pyspark.zip', '/v/lib/python3.11/site-packages']
    """
    sites = {os.path.normpath(p) for p in path if not p.endswith(".zip")}

    def installed_zip(p: str) -> bool:
        lib = os.path.dirname(os.path.normpath(p))
        return (p.endswith(".zip") and os.path.basename(lib) == "lib"
                and lib.endswith(os.path.join("pyspark", "python", "lib"))
                and os.path.dirname(os.path.dirname(os.path.dirname(lib))) in sites)

    moved = [p for p in path if installed_zip(p)]
    return [p for p in path if p not in moved] + moved


class Freezing:
    """Wraps the daemon's per-task ``worker(sock, authenticated)`` (see the module doc)."""

    def __init__(self, worker, full_every: int = FULL_EVERY) -> None:
        self.worker, self.full_every, self.tasks = worker, full_every, 0

    def __call__(self, sock, authenticated: bool) -> int:
        code = self.worker(sock, authenticated)
        self.tasks += 1
        if self.tasks % self.full_every == 0:
            gc.unfreeze()
        gc.collect()  # after a freeze: only what this task left
        gc.freeze()
        return code


def main() -> None:
    sys.path[:] = behind_site_packages(sys.path)
    import pyspark.daemon as daemon

    daemon.worker = Freezing(daemon.worker)  # manager() calls it by its module-global name
    daemon.manager()


KEY = "spark.python.daemon.module"


def daemon_config(master: str, extra: dict[str, str]) -> dict[str, str]:
    """The setting that runs this daemon, for a ``local`` master unless the user named
    a daemon. A cluster's executors keep Spark's own: their Python may be another
    installation, whose path this module cannot judge from the driver."""
    if not master.startswith("local") or KEY in extra:
        return {}
    return {KEY: "moirae.runtime.worker_daemon"}


if __name__ == "__main__":
    main()
