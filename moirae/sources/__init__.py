"""Stream sources: reproducible out-of-order file replay, the cluster scenario, the host monitor.

Each source yields pandas DataFrames (for batch archiving) and registers a Spark 4
Python Data Source (for live streaming). Importing this package does not import Spark;
:func:`register_all` does.

- Replay (DEBS'19): :class:`ReplayConfig`, :func:`replay_file`, :func:`replay_frame`,
  :func:`analyze_file`; Spark format ``moirae_replay``.
- Cluster scenario (M §1, §3): :func:`load_cluster_config`, :class:`ClusterScenario`
  (``history`` / ``frames`` / ``live``), :func:`ground_truth`; Spark format ``moirae_cluster``.
- Host monitor: :func:`moirae.sources.host.sample`; Spark format ``moirae_host``.
"""

from __future__ import annotations

from moirae.sources.analyze import StreamStats, analyze
from moirae.sources.cluster import STREAMS, ClusterScenario, ground_truth
from moirae.sources.cluster_config import ClusterConfig, load_cluster_config, parse_cluster_config
from moirae.sources.disorder import DISTRIBUTIONS, ReplayConfig, disorder, register_distribution
from moirae.sources.replay import Replay, analyze_file, replay_file, replay_frame

__all__ = [
    "DISTRIBUTIONS", "STREAMS", "ClusterConfig", "ClusterScenario", "Replay", "ReplayConfig", "StreamStats",
    "analyze", "analyze_file", "disorder", "ground_truth", "load_cluster_config", "parse_cluster_config",
    "register_all", "register_distribution", "replay_file", "replay_frame",
]


def register_all(spark) -> None:
    """Register ``moirae_replay``, ``moirae_cluster`` and ``moirae_host`` with ``spark``.

    Spark's Python workers must run this project's interpreter (``spark.pyspark.python``
    or ``PYSPARK_PYTHON`` set before the session starts), or they cannot import Moirae.
    """
    from moirae.sources.host import register_host_source
    from moirae.sources.spark_cluster import register_cluster_source
    from moirae.sources.spark_replay import register_replay_source

    register_replay_source(spark)
    register_cluster_source(spark)
    register_host_source(spark)
