"""Configuration: ``config/moirae.yaml`` (the documented defaults) turned into typed,
frozen settings.

A user file is merged over the defaults. An unknown key, a wrong type or an out-of-range
value raises :class:`ConfigError` naming the key (dotted) and the file.

>>> parse_duration("1h"), parse_duration("500ms"), parse_duration(90)
(datetime.timedelta(seconds=3600), datetime.timedelta(microseconds=500000), datetime.timedelta(seconds=90))
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import types
import typing
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from archive.settings import DEFAULT_CHUNK_TARGET_ROWS, ArchiveSettings
from moirae.base.durations import parse_duration
from moirae.base.errors import MoiraeError

DEFAULTS = Path(__file__).resolve().parent.parent / "config" / "moirae.yaml"
if not DEFAULTS.is_file():  # installed (pip install .): the copy packaged with moirae (moirae/defaults)
    DEFAULTS = Path(__file__).resolve().parent / "defaults" / "moirae.yaml"


class ConfigError(MoiraeError, ValueError):
    """A configuration file with an unknown key or a bad value; names both."""


def _positive(v, key):
    if v <= (timedelta(0) if isinstance(v, timedelta) else 0):
        raise ValueError("must be positive")


def _non_negative(v, key):
    if v < (timedelta(0) if isinstance(v, timedelta) else 0):
        raise ValueError("must be >= 0")


def _fraction(v, key):
    if not 0 <= v <= 1:
        raise ValueError("must be between 0 and 1")


def _identifier(v, key):
    if not re.match(r"^[a-z_][a-z0-9_]*$", v):
        raise ValueError("must be a lower-case SQL identifier")


def _port(v, key):
    if not 0 <= v < 65536:
        raise ValueError("must be a port number 0-65535")


def _host_names(v, key):
    if not isinstance(v, list | tuple) or not all(isinstance(h, str) and h and " " not in h for h in v):
        raise ValueError("must be a list of host names")


def _one_of(*choices):
    def check(v, key):
        if v not in choices:
            raise ValueError(f"must be one of {list(choices)}")
    return check


def _check(*checks):
    return {"checks": checks}


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    ui: bool = False
    shuffle_partitions: int = field(default=2, metadata=_check(_positive))
    trigger: timedelta = field(default=timedelta(seconds=1), metadata=_check(_positive))
    stop_grace: timedelta = field(default=timedelta(seconds=10), metadata=_check(_non_negative))


@dataclass(frozen=True)
class PostgresSettings:
    dsn: str = ""
    schema: str = field(default="moirae", metadata=_check(_identifier))


@dataclass(frozen=True)
class ArchiveConfig:
    chunk_span: timedelta = field(default=timedelta(hours=1), metadata=_check(_positive))
    recent_chunks: int = field(default=24, metadata=_check(_non_negative))
    statement_timeout: timedelta = field(default=timedelta(seconds=30), metadata=_check(_positive))
    present_cache_rows: int = field(default=2_000_000, metadata=_check(_non_negative))
    maintenance_interval: timedelta = field(default=timedelta(seconds=10), metadata=_check(_positive))
    chunk_target_rows: int = field(default=DEFAULT_CHUNK_TARGET_ROWS, metadata=_check(_non_negative))
    shared_read: bool = True  # a source is archived by the read of the first event-query on it (archive.shared)
    history_parallel_workers: int = field(default=0, metadata=_check(_non_negative))

    def settings(self) -> ArchiveSettings:
        return ArchiveSettings(self.chunk_span, self.recent_chunks,
                               int(self.statement_timeout.total_seconds() * 1000), self.present_cache_rows,
                               self.chunk_target_rows or None,
                               history_parallel_workers=self.history_parallel_workers)


@dataclass(frozen=True)
class RecallConfig:
    max_concurrent: int = field(default=4, metadata=_check(_positive))
    default_tickets: int = field(default=100, metadata=_check(_positive))
    min_tickets: int = field(default=1, metadata=_check(_positive))
    tickets_per_result: float = field(default=0.1, metadata=_check(_non_negative))
    feedback_period: int = field(default=20, metadata=_check(_positive))
    feedback_timeout: timedelta = field(default=timedelta(minutes=5), metadata=_check(_positive))
    materialization_load_threshold: float = field(default=0.5, metadata=_check(_fraction))


@dataclass(frozen=True)
class SimilaritySettings:
    """The ``[similarity]`` section; the context declaration of one event type is
    :class:`similarity.SimilarityConfig`."""

    k: int = field(default=5, metadata=_check(_positive))
    bandwidth: str | float = "silverman"
    histogram_bins: int = field(default=64, metadata=_check(_positive))
    novelty: str | float = "auto"
    novelty_quantile: float = field(default=0.05, metadata=_check(_fraction))
    index_cache_mb: int = field(default=256, metadata=_check(_positive))
    # "smooth" has the better precision@5, overall and on rare causes (bench/similarity_quality.py
    # measures it), so it is the default; "paper" keeps the paper's IDF (M 3.5).
    idf: str = field(default="smooth", metadata=_check(_one_of("paper", "smooth")))

    def __post_init__(self) -> None:
        b = self.bandwidth
        if not (b == "silverman" or (isinstance(b, int | float) and not isinstance(b, bool) and b > 0)):
            raise ValueError(f"must be 'silverman' or a positive number, got {b!r}")
        n = self.novelty
        if not (n == "auto" or (isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n <= 1)):
            raise ValueError(f"novelty must be 'auto' or a number in [0, 1], got {n!r}")

    def novelty_calibrator(self):
        """A Similarity Recall's novelty rule (:mod:`similarity.novelty`) from these keys."""
        from similarity.novelty import NoveltyCalibrator

        fixed = None if self.novelty == "auto" else float(self.novelty)
        return NoveltyCalibrator(quantile=self.novelty_quantile, fixed=fixed)

    def numeric_spec(self):
        """The :class:`similarity.NumericSpec` a Similarity Recall gives each numeric
        attribute it declares by name (M 3.5): this bandwidth (None: Silverman's rule)
        and ``histogram_bins`` bins per standard deviation of the histogram synopsis."""
        from similarity import NumericSpec

        return NumericSpec(bandwidth=None if self.bandwidth == "silverman" else float(self.bandwidth),
                           bins_per_sigma=self.histogram_bins)


@dataclass(frozen=True)
class AnankeConfig:
    enabled: bool = True
    variant: str = field(default="ank1", metadata=_check(_one_of("ank1", "ankn")))
    window_provenance: str = field(default="archive", metadata=_check(_one_of("archive", "state")))
    polynomials: bool = True  # how-provenance polynomials per alert (ananke.polynomial, H 4)


@dataclass(frozen=True)
class RetractConfig:
    # a retraction matching more than this share of its stream's archived rows needs confirm
    max_share: float = field(default=0.05, metadata=_check(_fraction))


@dataclass(frozen=True)
class ApiConfig:
    host: str = "127.0.0.1"
    port: int = field(default=8642, metadata=_check(_port))
    token: str = ""
    tls_cert: str = ""  # PEM certificate (chain): serve HTTPS (moirae.api.server)
    tls_key: str = ""
    allowed_hosts: tuple[str, ...] = field(default=(), metadata=_check(_host_names))  # moirae.api.access

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".moirae")
    scenario: str = field(default="cluster", metadata=_check(_one_of("cluster", "host", "maritime")))
    spark: SparkSettings = field(default_factory=SparkSettings)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    archive: ArchiveConfig = field(default_factory=ArchiveConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    similarity: SimilaritySettings = field(default_factory=SimilaritySettings)
    ananke: AnankeConfig = field(default_factory=AnankeConfig)
    retract: RetractConfig = field(default_factory=RetractConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    source: str = "defaults"

    def __post_init__(self) -> None:
        if not self.api.loopback and not self.api.token:
            raise ConfigError(f"api.host: binding to {self.api.host!r} (beyond localhost) requires api.token "
                              f"({self.source})")


def load(path: str | Path | None = None, overrides: dict | None = None) -> Settings:
    """The defaults, merged with ``path`` (if given) and ``overrides`` (a nested dict)."""
    data = _read(DEFAULTS)
    source = str(DEFAULTS)
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"configuration file {p} does not exist")
        data = _merge(data, _read(p), str(p))
        source = str(p)
    if overrides:
        data = _merge(data, overrides, "overrides")
    return _build(Settings, {**data, "source": source}, "", source)


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return data


def _merge(base: dict, top: dict, where: str, prefix: str = "") -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge(base[key], value, where, f"{prefix}{key}.")
        else:
            out[key] = value
    return out


def _build(cls, data: dict, prefix: str, source: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'configuration'}: expected a mapping, got {data!r} ({source})")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown configuration key '{prefix}{unknown[0]}' in {source} "
                          f"(known keys here: {', '.join(sorted(k for k in fields if k != 'source'))})")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        hint = hints[name]
        try:
            if dataclasses.is_dataclass(hint):
                kwargs[name] = _build(hint, value, f"{key}.", source)
                continue
            kwargs[name] = _convert(value, hint)
            for check in fields[name].metadata.get("checks", ()):
                check(kwargs[name], key)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"configuration key {key!r} in {source}: {exc} (got {value!r})") from None
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"configuration section {prefix.rstrip('.') or 'top level'!r} in {source}: {exc}") from None


def _convert(value: Any, hint: Any) -> Any:
    if hint is timedelta:
        return parse_duration(value)
    if hint is Path:
        if not isinstance(value, str | Path):
            raise TypeError("expected a path")
        return Path(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError("expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("expected an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError("expected a number")
        return float(value)
    if hint is str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return value
    if isinstance(hint, types.UnionType):
        return value
    return value
