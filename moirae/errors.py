"""Every public error of Moirae, in one place (the shape of APScheduler's ``_exceptions``).

All of them derive from :class:`MoiraeError` (:mod:`moirae.base.errors`, the bottom layer),
most through their package's root error: :class:`SchedulerError`, :class:`SimilarityError`,
:class:`ArchiveError`, :class:`AnankeError`, :class:`RecallError`, :class:`SourceError`,
:class:`RuntimeFailure`, :class:`PatternError`; each also inherits the matching built-in (``ValueError``,
``LookupError``, ...), so callers may catch either. Each error is defined in its package's
``errors`` module and only re-exported here; ``tests/moirae/test_errors_index.py`` checks
that every :class:`MoiraeError` subclass in the code base is.

The fronts' errors (CLI, HTTP API, console) and :class:`ConfigError` are imported on first
use, so importing this index does not import the fronts.

>>> from moirae.errors import ChunkNotFound, MoiraeError
>>> issubclass(ChunkNotFound, MoiraeError) and issubclass(ChunkNotFound, LookupError)
True
"""

from ananke.errors import (
    AnankeError,
    BadDuration,
    BadPrefix,
    GraphError,
    ProvenanceError,
    UnknownSink,
    UnknownSinkName,
)
from archive.errors import (
    ArchiveError,
    BadName,
    BatchTooWide,
    ChunkNotFound,
    DatabaseUnavailable,
    HistoryQueryCancelled,
    HistoryQueryFailed,
    HistoryQueryTimeout,
    MaterializationError,
    MissingParameter,
    ReferenceTableError,
    SchemaConflict,
    SchemaVersionError,
    UnknownStream,
    UnsafeQuery,
    UnsupportedType,
)
from moirae.base.durations import DurationError
from moirae.base.errors import MoiraeError
from moirae.base.lazy import lazy_exports
from moirae.delivery.errors import DeliveryConfigError, DeliveryError, DeliveryFailed
from moirae.incidents.errors import IncidentError, NoSuchIncident
from moirae.patterns.errors import (
    PatternError,
    PatternStateError,
    PatternSyntaxError,
    PredicateEvaluationError,
    UnboundedPattern,
    UndefinedSymbol,
    UnknownPatternColumn,
)
from moirae.queries.errors import QueryDefinitionError
from moirae.retract.errors import (
    BadPredicate,
    BadSelection,
    NoSuchRetraction,
    RetractError,
    TooBroad,
    UnknownRetractStream,
)
from moirae.rules.errors import RuleError
from moirae.runtime.errors import (
    CheckpointMismatch,
    ClusterStartError,
    EngineError,
    JavaMissing,
    RuntimeFailure,
)
from moirae.sources.errors import (
    InvalidDelayRange,
    InvalidFraction,
    InvalidReplayOption,
    InvalidSourceOption,
    MissingColumn,
    NonTemporalColumn,
    ScenarioConfigError,
    SourceError,
    SourceFileNotFound,
    UnknownSourceKind,
    UnparseableRows,
    UnsupportedFormat,
)
from recall.errors import (
    BadTemplate,
    DuplicateOperator,
    ManagerClosed,
    RecallError,
    RecallManagerError,
    RevisionError,
    SimilarityRecallError,
    SnapshotVersionError,
    UnknownEventAttribute,
    UnknownOperator,
    UnsupportedAggregate,
)
from scheduler.errors import (
    DuplicateTask,
    InvalidSchedulerConfig,
    InvalidTaskSpec,
    InvalidTickets,
    SchedulerError,
    TaskNotRunning,
    UnknownEvent,
    UnknownTask,
)
from similarity.errors import (
    CorruptIndex,
    InvalidSimilarityConfig,
    NonNumericValue,
    NotLearned,
    SimilarityError,
    SnapshotError,
)

#: errors of the fronts (and the configuration), imported on first use
_LAZY = {
    "ConfigError": "moirae.config",
    "ApiError": "moirae.api.errors",
    "ClientError": "moirae.api.errors",
    "NoEngine": "moirae.api.errors",
    "BadEids": "moirae.api.errors",
    "BadTickets": "moirae.api.errors",
    "NoSuchEvent": "moirae.api.errors",
    "ReplayFlagError": "moirae.cli.errors",
    "ReplayMismatch": "moirae.cli.errors",
    "NoMonitorFile": "moirae.cli.errors",
    "MonitorError": "moirae.deploy.lifecycle",
    "UnknownMonitor": "moirae.deploy.lifecycle",
    "QueryRetired": "moirae.ingest.live",
    "EngineNotRunning": "moirae.read.errors",
    "MonitorFileError": "moirae.monitors.errors",
    "MonitorUnavailable": "moirae.monitors.errors",
    "UnsupportedSql": "moirae.monitors.errors",
    "NatsSourceError": "moirae.sources.nats",
    "MqttSourceError": "moirae.sources.mqtt",
    "RemoteWriteError": "moirae.sources.prometheus",
    "AlertPayloadError": "moirae.sources.alerts_in",
    "InboxError": "moirae.sources.inbox",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "AnankeError", "ArchiveError", "BadDuration", "BadName", "BadPrefix", "BadTemplate",
    "BatchTooWide", "CheckpointMismatch", "ChunkNotFound", "DeliveryConfigError", "DeliveryError", "DeliveryFailed", "ClusterStartError", "CorruptIndex", "DatabaseUnavailable",
    "DuplicateOperator", "DuplicateTask", "DurationError", "EngineError", "GraphError",
    "HistoryQueryCancelled", "HistoryQueryFailed", "HistoryQueryTimeout", "IncidentError",
    "InvalidDelayRange", "InvalidFraction", "InvalidReplayOption", "InvalidSourceOption", "InvalidSchedulerConfig",
    "InvalidSimilarityConfig", "InvalidTaskSpec", "InvalidTickets", "JavaMissing", "ManagerClosed",
    "MaterializationError", "MissingColumn", "MissingParameter", "MoiraeError", "NoSuchIncident",
    "NonNumericValue", "NonTemporalColumn", "NotLearned", "ProvenanceError",
    "PatternError", "PatternStateError", "PatternSyntaxError", "PredicateEvaluationError",
    "UnboundedPattern", "UndefinedSymbol", "UnknownPatternColumn",
    "QueryDefinitionError", "RecallError", "RecallManagerError", "ReferenceTableError", "RevisionError",
    "RuleError", "RuntimeFailure",
    "BadPredicate", "BadSelection", "NoSuchRetraction", "RetractError", "TooBroad", "UnknownRetractStream",
    "ScenarioConfigError", "SchedulerError", "SchemaConflict", "SchemaVersionError",
    "SimilarityError", "SimilarityRecallError", "SnapshotError", "SnapshotVersionError",
    "SourceError", "SourceFileNotFound", "TaskNotRunning", "UnknownEvent", "UnknownEventAttribute",
    "UnknownOperator", "UnknownSink", "UnknownSinkName", "UnknownSourceKind", "UnknownStream", "UnknownTask",
    "UnparseableRows", "UnsafeQuery", "UnsupportedAggregate", "UnsupportedFormat",
    "UnsupportedType",
    *_LAZY,
]
