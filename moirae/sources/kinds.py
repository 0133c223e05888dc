"""The source kinds a monitor file may declare (docs/MONITORS.md, "sources").

A kind is a name, a builder and the JSON Schema of its options. The builder is called
as ``build(spark, options, schema)`` (``schema``: the Spark ``StructType`` the monitor
file declares for the source, or None) and returns a streaming DataFrame. Kinds built
here: ``file`` (Spark's file source: CSV, JSON or Parquet, one file or a folder that
grows), ``replay`` (a file replayed with the disorder knobs of
:mod:`moirae.sources.spark_replay`), ``rate`` (Spark's rate source, for tests),
``cluster`` and ``host`` (the built-in scenarios' generators). Other modules add theirs
with :func:`register_kind` (the broker kinds: their modules are imported on first
lookup, :data:`LAZY_KINDS`).

Importing this module does not import Spark.

>>> sorted(k for k in kinds() if k in ("file", "rate", "replay"))
['file', 'rate', 'replay']
>>> kind("nope")
Traceback (most recent call last):
...
moirae.sources.errors.UnknownSourceKind: unknown source kind 'nope' (kinds: alertmanager, cluster, file, host, maritime, mqtt, nats, prometheus, rate, replay)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from moirae.sources.errors import UnknownSourceKind

#: ``build(spark, options, schema) -> streaming DataFrame``
Builder = Callable[[Any, Mapping[str, Any], Any], Any]


@dataclass(frozen=True)
class SourceKind:
    """One kind of source: its name, builder, options' JSON Schema and a one-line doc.
    ``needs_schema``: the monitor file must declare the source's columns (``schema:``)."""

    name: str
    build: Builder
    options_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    doc: str = ""
    needs_schema: bool = False
    #: options the engine fills in when the file leaves them out (``data_dir``: the engine's data directory)
    engine_options: tuple[str, ...] = ()


_KINDS: dict[str, SourceKind] = {}

#: kinds whose builders live in modules imported on first lookup (the broker sources):
#: name -> (``module:function``, options the engine fills in). A module may instead call
#: :func:`register_kind` itself when imported.
LAZY_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "nats": ("moirae.sources.nats:build", ()),
    "mqtt": ("moirae.sources.mqtt:build", ()),
    "prometheus": ("moirae.sources.prometheus:build", ("data_dir",)),
    "alertmanager": ("moirae.sources.alerts_in:build", ("data_dir",)),
    "maritime": ("moirae.sources.maritime_source:build", ("data_dir",)),
}


def register_kind(k: SourceKind) -> SourceKind:
    """Register (or replace) a source kind; returns it."""
    _KINDS[k.name] = k
    return k


def kinds() -> dict[str, SourceKind]:
    """Every registered kind, by name (lazily registered ones included once imported)."""
    return dict(_KINDS)


def kind(name: str) -> SourceKind:
    """The kind ``name``; raises :class:`UnknownSourceKind` naming the known kinds."""
    if name not in _KINDS and name in LAZY_KINDS:
        ref, engine_options = LAZY_KINDS[name]
        module, _, fn = ref.partition(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise UnknownSourceKind(f"source kind {name!r} is not available in this build ({exc})") from None
        if name not in _KINDS:
            build = getattr(mod, fn, None)
            if not callable(build):
                raise UnknownSourceKind(f"source kind {name!r} is not available in this build ({ref} is missing)")
            schema = getattr(mod, "OPTIONS_SCHEMA", {"type": "object"})
            register_kind(SourceKind(name, build, schema, (mod.__doc__ or "").strip().split("\n")[0],
                                     engine_options=engine_options))
    if name not in _KINDS:
        raise UnknownSourceKind(f"unknown source kind {name!r} (kinds: {', '.join(sorted({*_KINDS, *LAZY_KINDS}))})")
    return _KINDS[name]


def _opts(options: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Spark reader options as strings (booleans lower-case, as Spark expects)."""
    out = {}
    for k, v in options.items():
        if k in skip or v is None:
            continue
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _file(spark, options: Mapping[str, Any], schema) -> Any:
    """Spark's file source: ``path`` is a file, a folder (new files are read as they
    arrive) or a glob; ``format`` csv (with a header by default), json or parquet; at
    most ``maxFilesPerTrigger`` new files per micro-batch (default
    :data:`moirae.sources.bounds.DEFAULT_MAX_FILES`, 0: no bound)."""
    from moirae.sources.bounds import max_files

    fmt = options.get("format", "csv")
    reader = spark.readStream.format(fmt).schema(schema)
    extra = {k: v for k, v in _opts(options, ("path", "format")).items() if k.lower() != "maxfilespertrigger"}
    if fmt == "csv":
        extra.setdefault("header", "true")
    bound = max_files(options, f"file source {str(options.get('path'))!r}")
    if bound is not None:
        extra["maxFilesPerTrigger"] = str(bound)
    return reader.options(**extra).load(str(options["path"]))


def _replay(spark, options: Mapping[str, Any], schema) -> Any:
    from moirae.sources.spark_replay import FORMAT, register_replay_source

    register_replay_source(spark)
    return spark.readStream.format(FORMAT).options(**_opts(options)).load()


def _rate(spark, options: Mapping[str, Any], schema) -> Any:
    """Spark's ``rate`` source (paced by ``rowsPerSecond``, unbounded), or with
    ``rowsPerBatch`` its bounded form ``rate-micro-batch`` (:mod:`moirae.sources.bounds`)."""
    from moirae.sources.bounds import rate_format

    return spark.readStream.format(rate_format(options)).options(**_opts(options)).load()


def _cluster(spark, options: Mapping[str, Any], schema) -> Any:
    from moirae.sources.spark_cluster import FORMAT, register_cluster_source

    register_cluster_source(spark)
    return spark.readStream.format(FORMAT).options(**_opts(options)).load()


def _host(spark, options: Mapping[str, Any], schema) -> Any:
    from moirae.sources.host import FORMAT, register_host_source

    register_host_source(spark)
    return spark.readStream.format(FORMAT).options(**_opts(options)).load()


_NUM = {"type": ["number", "string"]}
register_kind(SourceKind("file", _file, {
    "type": "object", "required": ["path"], "additionalProperties": {"type": ["string", "number", "boolean"]},
    "properties": {"path": {"type": "string", "minLength": 1}, "format": {"enum": ["csv", "json", "parquet"]},
                   "maxFilesPerTrigger": {"type": "integer", "minimum": 0}}},
    "a CSV, JSON or Parquet file, or a folder of them that grows (Spark's file source)", needs_schema=True))
register_kind(SourceKind("replay", _replay, {
    "type": "object", "required": ["path", "ts_col"], "additionalProperties": False,
    "properties": {"path": {"type": "string"}, "ts_col": {"type": "string"}, "unit": {"type": "string"},
                   "out_of_order": _NUM, "min_delay_ms": _NUM, "max_delay_ms": _NUM,
                   "distribution": {"type": "string"}, "seed": {"type": ["integer", "string"]},
                   "speedup": {"type": ["number", "string"]}, "maxRowsPerBatch": {"type": ["integer", "string"]},
                   "deadLetterPath": {"type": "string"}}},
    "a CSV or Parquet file replayed out of order (speed-up, lateness, disorder; moirae_replay)"))
register_kind(SourceKind("rate", _rate, {
    "type": "object", "additionalProperties": False,
    "properties": {"rowsPerSecond": {"type": "integer", "minimum": 1}, "rampUpTime": {"type": "string"},
                   "numPartitions": {"type": "integer", "minimum": 1}, "rowsPerBatch": {"type": "integer", "minimum": 1},
                   "advanceMillisPerBatch": {"type": "integer", "minimum": 0},
                   "startTimestamp": {"type": "integer", "minimum": 0}}},
    "Spark's rate source (columns timestamp, value), for tests; rowsPerBatch bounds it (rate-micro-batch)"))
register_kind(SourceKind("cluster", _cluster, {
    "type": "object", "required": ["config", "stream"], "additionalProperties": {"type": ["string", "number"]},
    "properties": {"config": {"type": "string"}, "stream": {"enum": ["metrics", "users", "procs", "incidents"]}}},
    "the cluster scenario's generator (moirae_cluster)"))
register_kind(SourceKind("host", _host, {
    "type": "object", "required": ["stream"], "additionalProperties": False,
    "properties": {"stream": {"enum": ["metrics", "users", "procs"]}, "period_s": {"type": ["number", "string"]}}},
    "this machine's metrics, users and processes (psutil; moirae_host)"))
