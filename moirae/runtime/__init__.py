"""What the engine runs on: the Spark session and its Python/JVM tweaks, stopping and
pausing streaming queries, the failure log, the archive the configuration names.

- :mod:`~moirae.runtime.spark`: the one Spark session factory (with :mod:`~moirae.runtime.hadoop_fs`,
  :mod:`~moirae.runtime.python_launcher`, :mod:`~moirae.runtime.worker_daemon`).
- :mod:`~moirae.runtime.supervise`, :mod:`~moirae.runtime.graceful_stop`, :mod:`~moirae.runtime.idle`:
  live streaming queries paused on a full disk, stopped between batches, seen idle.
- :mod:`~moirae.runtime.errorlog`: failures go to log files; :mod:`~moirae.runtime.store`: the archive
  the configuration names; :mod:`~moirae.runtime.standalone`: a local standalone cluster.
- :mod:`~moirae.runtime.errors`: :class:`EngineError`, :class:`JavaMissing`, :class:`ClusterStartError`.
"""

from moirae.base.lazy import lazy_exports

_WHERE = {
    "ClusterStartError": "moirae.runtime.errors",
    "EngineError": "moirae.runtime.errors",
    "JavaMissing": "moirae.runtime.errors",
    "LiveQuery": "moirae.runtime.supervise",
    "StandaloneCluster": "moirae.runtime.standalone",
    "Supervisor": "moirae.runtime.supervise",
    "database_dsn": "moirae.runtime.store",
    "file_logger": "moirae.runtime.errorlog",
    "open_archiver": "moirae.runtime.store",
    "record_failure": "moirae.runtime.errorlog",
    "spark_session": "moirae.runtime.spark",
    "stop_between_batches": "moirae.runtime.graceful_stop",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
