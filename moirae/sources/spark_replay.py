"""File replay as a Spark 4 Python Data Source: format ``moirae_replay``.

Usage::

    register_replay_source(spark)
    df = (spark.readStream.format("moirae_replay")
          .option("path", "trips.csv").option("ts_col", "pickup").option("unit", "ms")
          .option("out_of_order", "20").option("max_delay_ms", "2000").option("seed", "7")
          .option("speedup", "max").load())

Options mirror :class:`~moirae.sources.disorder.ReplayConfig` (``path``, ``ts_col``,
``unit``, ``out_of_order``, ``min_delay_ms``, ``max_delay_ms``, ``distribution``,
``seed``, ``speedup``) plus ``maxRowsPerBatch`` (the source's admission control: rows per micro-batch at
most, default :data:`DEFAULT_MAX_ROWS`, 0 for no bound; a query that fell behind
catches up in bounded batches, not one batch of the whole backlog) and
``deadLetterPath``: rows with an unparseable event time are written there as CSV with
their reason; without it, such rows make the source fail (UnparseableRows) rather than
vanish (docs/ARCHITECTURE.md, "Invariants").

Micro-batches follow ingestion time and the speed-up factor (:class:`Pacer`); offsets
are ``{"pos": n}``, row positions in the disordered order, so a query restarted from its
checkpoint resumes at exactly the next row (DEBS'19 §2.3.3: delivery respects delays).
Batch reads (``spark.read.format("moirae_replay")``) return the whole disordered stream.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from moirae.sources.disorder import ReplayConfig
from moirae.sources.errors import InvalidReplayOption, UnparseableRows
from moirae.sources.pacing import Pacer, spark_schema, to_arrow_batch
from moirae.sources.replay import Replay, replay_file

FORMAT = "moirae_replay"
_FLOAT_KEYS = ("out_of_order", "min_delay_ms", "max_delay_ms")
#: rows per micro-batch at most unless ``maxRowsPerBatch`` says otherwise
DEFAULT_MAX_ROWS = 1_000_000
_KNOWN = {"path", "ts_col", "unit", "distribution", "seed", "speedup", "maxrowsperbatch",
          "deadletterpath", *_FLOAT_KEYS}


def config_from_options(options) -> tuple[str, ReplayConfig]:
    """Parse string options (case-insensitive keys) into ``(path, ReplayConfig)``."""
    opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise InvalidReplayOption(f"unknown {FORMAT} option(s): {', '.join(unknown)}")
    for key in ("path", "ts_col"):
        if key not in opts:
            raise InvalidReplayOption(f"{FORMAT} needs the option {key!r}")
    kwargs: dict = {"ts_col": opts["ts_col"]}
    if opts.get("unit") not in (None, "", "none", "temporal"):
        kwargs["unit"] = opts["unit"]
    for key in _FLOAT_KEYS:
        if key in opts:
            try:
                kwargs[key] = float(opts[key])
            except ValueError:
                raise InvalidReplayOption(f"option {key!r} must be a number, got {opts[key]!r}") from None
    if "seed" in opts:
        try:
            kwargs["seed"] = int(opts["seed"])
        except ValueError:
            raise InvalidReplayOption(f"option 'seed' must be an integer, got {opts['seed']!r}") from None
    if "distribution" in opts:
        kwargs["distribution"] = opts["distribution"]
    if "speedup" in opts:
        raw = opts["speedup"]
        try:
            kwargs["speedup"] = "max" if raw == "max" else float(raw)
        except ValueError:
            raise InvalidReplayOption(f"option 'speedup' must be a number or 'max', got {raw!r}") from None
    return opts["path"], ReplayConfig(**kwargs)


def _load(options) -> Replay:
    path, config = config_from_options(options)
    replay = replay_file(path, config)
    if len(replay.rejected):
        target = {str(k).lower(): v for k, v in dict(options).items()}.get("deadletterpath")
        if not target:
            first = replay.rejected.iloc[0]
            raise UnparseableRows(
                f"{path}: {len(replay.rejected)} row(s) with unparseable event time (first: row {first['row']}, "
                f"{first['reason']}); set option deadLetterPath to divert them")
        replay.rejected.to_csv(target, index=False)
    return replay


class RowsPartition(InputPartition):
    """A slice of the disordered stream, shipped to the executor with its rows."""

    def __init__(self, start: int, end: int, frame) -> None:
        super().__init__((start, end))
        self.frame = frame


class ReplayDataSource(DataSource):
    """``moirae_replay``: a file replayed in reproducible out-of-order ingestion order."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _replay(self) -> Replay:
        if not hasattr(self, "_cached"):
            self._cached = _load(self.options)
        return self._cached

    def schema(self):
        return spark_schema(self._replay().rows)

    def reader(self, schema) -> DataSourceReader:
        return ReplayBatchReader(self._replay(), schema)

    def streamReader(self, schema) -> DataSourceStreamReader:
        return ReplayStreamReader(self._replay(), schema, self.options)


class ReplayBatchReader(DataSourceReader):
    """The whole disordered stream as one batch, in delivery order."""

    def __init__(self, replay: Replay, schema) -> None:
        self.frame = replay.rows
        self.schema = schema

    def read(self, partition):
        if len(self.frame):
            yield to_arrow_batch(self.frame, self.schema)


class ReplayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the disordered stream, paced by ingestion time."""

    def __init__(self, replay: Replay, schema, options) -> None:
        from scheduler.clock import MonotonicClock

        self.frame = replay.rows
        self.schema = schema
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        cap = opts.get("maxrowsperbatch", DEFAULT_MAX_ROWS)
        try:
            cap = int(cap)
        except (TypeError, ValueError):
            raise InvalidReplayOption(f"option 'maxRowsPerBatch' must be a whole number, got {cap!r}") from None
        if cap < 0:
            raise InvalidReplayOption(f"option 'maxRowsPerBatch' must be 0 (no bound) or more, got {cap!r}")
        self.max_rows = cap or None
        ingest = replay.rows["ingest_ts"].to_numpy(dtype="datetime64[ns]").view("int64")
        self.pacer = Pacer(ingest, replay.config.speedup, MonotonicClock())
        self.available_now = False

    def initialOffset(self) -> dict:
        return {"pos": 0}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        # The engine's limit wins (an availableNow trigger passes ReadAllAvailable).
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        pos = int(start["pos"])
        if self.available_now:  # Trigger.AvailableNow: everything there is, in capped batches
            end = len(self.frame) if cap is None else min(len(self.frame), pos + cap)
            return {"pos": max(end, pos)}
        return {"pos": self.pacer.due(pos, cap)}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True

    def partitions(self, start: dict, end: dict):
        a, b = int(start["pos"]), int(end["pos"])
        if b <= a:
            return []
        return [RowsPartition(a, b, self.frame.iloc[a:b])]

    def read(self, partition):
        if len(partition.frame):
            yield to_arrow_batch(partition.frame, self.schema)


def register_replay_source(spark) -> None:
    """Register ``moirae_replay`` with ``spark`` (idempotent)."""
    spark.dataSource.register(ReplayDataSource)
