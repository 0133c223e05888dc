"""The cluster scenario's live part as a Spark 4 Python Data Source: format ``moirae_cluster``.

Usage::

    register_cluster_source(spark)
    metrics = (spark.readStream.format("moirae_cluster")
               .option("config", "config/scenarios/cluster.yaml").option("stream", "metrics")
               .load())

Options:

- ``config``: the scenario file (default ``config/scenarios/cluster.yaml``);
- ``stream``: ``metrics``, ``users``, ``procs`` or ``incidents`` (required);
- ``start``: scenario time (ISO 8601, with zone) where the live stream begins; default:
  the end of the configured history, so live continues the archived past;
- ``until``: optional scenario time where the stream ends (a bounded replay);
- ``speedup``: scenario seconds per wall second (default: the file's ``live.speedup``),
  or ``max`` to deliver ``maxSpanSeconds`` (default 3600) of scenario time per batch;
- ``maxSpanSeconds``: also the source's admission control when paced: a micro-batch
  covers at most that much scenario time, so a query that fell behind catches up in
  bounded batches instead of one batch of the whole backlog (docs/ARCHITECTURE.md, 3.7);
- ``out_of_order``, ``min_delay_ms``, ``max_delay_ms``, ``distribution``: override the
  file's ``live`` section (DEBS'19 disorder, per-row delays fixed by the seed).

Offsets are ``{"t": ns}``, the ingestion time delivered so far; a batch covers the
ingestion-time span [start, end) and is regenerated from the seed, so a restarted query
resumes exactly where its checkpoint left off. Rows carry an extra ``ingest_ts``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from moirae.sources.cluster import STREAMS, ClusterScenario
from moirae.sources.cluster_config import ClusterConfig, load_cluster_config, parse_cluster_config
from moirae.sources.errors import InvalidReplayOption
from moirae.sources.pacing import to_arrow_batch

FORMAT = "moirae_cluster"
DEFAULT_CONFIG = "config/scenarios/cluster.yaml"
SCHEMAS = {
    "metrics": "ts timestamp, sid string, cpu double, mem double, bw double, ingest_ts timestamp",
    "users": "ts timestamp, sid string, user string, ingest_ts timestamp",
    "procs": "ts timestamp, sid string, proc string, ingest_ts timestamp",
    "incidents": "ts timestamp, iid long, sid string, kind string, cause string, resolution string, "
                 "ingest_ts timestamp",
}
_KNOWN = {"config", "stream", "start", "until", "speedup", "maxspanseconds", "out_of_order", "min_delay_ms",
          "max_delay_ms", "distribution"}


def _iso_ns(key: str, value: str) -> int:
    try:
        ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidReplayOption(f"option {key!r} must be an ISO 8601 time, got {value!r}") from None
    if ts.tzinfo is None:
        raise InvalidReplayOption(f"option {key!r} must carry a time zone, got {value!r}")
    return int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1_000


@dataclasses.dataclass(frozen=True)
class ClusterStreamSpec:
    """Parsed options of one ``moirae_cluster`` stream."""

    config: ClusterConfig
    stream: str
    start_ns: int
    until_ns: int | None
    speedup: float | str
    max_span_ns: int


def spec_from_options(options) -> ClusterStreamSpec:
    """Validate ``moirae_cluster`` options (case-insensitive keys)."""
    opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise InvalidReplayOption(f"unknown {FORMAT} option(s): {', '.join(unknown)}")
    stream = opts.get("stream")
    if stream not in STREAMS:
        raise InvalidReplayOption(f"option 'stream' must be one of {', '.join(STREAMS)}, got {stream!r}")
    path = opts.get("config", DEFAULT_CONFIG)
    config = load_cluster_config(path)
    live = {}
    for key in ("out_of_order", "min_delay_ms", "max_delay_ms"):
        if key in opts:
            try:
                live[key] = float(opts[key])
            except ValueError:
                raise InvalidReplayOption(f"option {key!r} must be a number, got {opts[key]!r}") from None
    if "distribution" in opts:
        live["distribution"] = opts["distribution"]
    if live:  # re-validate through the loader so the rules live in one place
        raw_live = {**dataclasses.asdict(config.live), **live}
        checked = parse_cluster_config({"live": raw_live}, f"{path} (options)").live
        config = dataclasses.replace(config, live=checked)
    raw_speed = opts.get("speedup", str(config.live.speedup))
    try:
        speedup: float | str = "max" if raw_speed == "max" else float(raw_speed)
    except ValueError:
        raise InvalidReplayOption(f"option 'speedup' must be a number or 'max', got {raw_speed!r}") from None
    if speedup != "max" and not float(speedup) > 0:
        raise InvalidReplayOption(f"option 'speedup' must be positive, got {raw_speed!r}")
    start = _iso_ns("start", opts["start"]) if "start" in opts else config.history_end_ns
    until = _iso_ns("until", opts["until"]) if "until" in opts else None
    try:
        span = float(opts.get("maxspanseconds", "3600"))
    except ValueError:
        raise InvalidReplayOption(f"option 'maxSpanSeconds' must be a number, got {opts['maxspanseconds']!r}") from None
    if not span > 0:
        raise InvalidReplayOption(f"option 'maxSpanSeconds' must be positive, got {opts['maxspanseconds']!r}")
    return ClusterStreamSpec(config, stream, start, until, speedup, int(span * 1e9))


class SpanPartition(InputPartition):
    """The ingestion-time span [a, b) of one stream, regenerated on the executor."""

    def __init__(self, spec: ClusterStreamSpec, a: int, b: int) -> None:
        super().__init__((a, b))
        self.spec, self.a, self.b = spec, a, b


class ClusterDataSource(DataSource):
    """``moirae_cluster``: the live continuation of the cluster scenario."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        stream = {str(k).lower(): v for k, v in dict(self.options).items()}.get("stream")
        if stream not in SCHEMAS:
            raise InvalidReplayOption(f"option 'stream' must be one of {', '.join(STREAMS)}, got {stream!r}")
        return SCHEMAS[stream]

    def streamReader(self, schema) -> DataSourceStreamReader:
        return ClusterStreamReader(spec_from_options(self.options), schema)


class ClusterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of scenario time, paced by the wall clock times the speed-up."""

    def __init__(self, spec: ClusterStreamSpec, schema) -> None:
        from scheduler.clock import MonotonicClock

        self.spec, self.schema = spec, schema
        self.clock = MonotonicClock()
        self._anchor: tuple[int, float] | None = None
        self.available_now = False
        self._target: int | None = None

    def initialOffset(self) -> dict:
        return {"t": self.spec.start_ns}

    def prepareForTriggerAvailableNow(self) -> None:
        if self.spec.until_ns is None and self.spec.speedup == "max":
            raise InvalidReplayOption(f"{FORMAT}: an availableNow trigger with speedup=max needs the option 'until'")
        self.available_now = True

    def _horizon(self, t: int) -> int:
        """Scenario time reached by now (wall clock x speed-up since the anchor), or one max span."""
        spec = self.spec
        if spec.speedup == "max":
            return t + spec.max_span_ns
        now = self.clock.now()
        if self._anchor is None or self._anchor[0] > t:
            self._anchor = (t, now)
        t0, wall0 = self._anchor
        return t0 + int((now - wall0) * float(spec.speedup) * 1e9)

    def latestOffset(self, start: dict, limit) -> dict:
        t = int(start["t"])
        spec = self.spec
        if self.available_now:  # everything up to `until` (or up to now when first asked), in spans
            if self._target is None:
                self._target = spec.until_ns if spec.until_ns is not None else self._horizon(t)
            end = min(self._target, t + spec.max_span_ns)
        else:  # paced: what the clock made due, at most one span (admission control)
            end = min(self._horizon(t), t + spec.max_span_ns)
            if spec.until_ns is not None:
                end = min(end, spec.until_ns)
        return {"t": max(t, end)}

    def partitions(self, start: dict, end: dict):
        a, b = int(start["t"]), int(end["t"])
        return [SpanPartition(self.spec, a, b)] if b > a else []

    def read(self, partition):
        spec = partition.spec
        df = ClusterScenario(spec.config).live(partition.a, partition.b, spec.stream, since_ns=spec.start_ns)
        if len(df):
            yield to_arrow_batch(df, self._struct())

    def _struct(self):
        from pyspark.sql.types import StructType

        return self.schema if isinstance(self.schema, StructType) else StructType.fromDDL(self.schema)


def register_cluster_source(spark) -> None:
    """Register ``moirae_cluster`` with ``spark`` (idempotent)."""
    spark.dataSource.register(ClusterDataSource)
