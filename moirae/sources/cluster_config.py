"""The ``cluster`` scenario's configuration: frozen value objects and a strict YAML loader.

The scenario follows the Moirae paper's running example (M §1, §3.1-3.5): servers whose
metrics feed the bandwidth event-query of M fig. 1, logged-in users and running
processes as the context of each alert (M fig. 3), and past incidents with the
resolution applied. Every key is documented in ``config/scenarios/cluster.yaml``.

An unknown key or a bad value raises :class:`ScenarioConfigError` naming the key (with
its path, e.g. ``causes[1].rate_per_day``) and the file.

>>> cfg = parse_cluster_config({"servers": 3, "causes": []}, "inline")
>>> cfg.servers, cfg.metrics.bw_threshold_mbps
(3, 600.0)
>>> parse_cluster_config({"serverz": 3}, "inline")
Traceback (most recent call last):
...
moirae.sources.errors.ScenarioConfigError: inline: unknown key 'serverz'
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from moirae.sources.disorder import DISTRIBUTIONS
from moirae.sources.errors import ScenarioConfigError, SourceFileNotFound

KINDS = ("overload", "failure")
METRICS = ("cpu", "mem", "bw")


@dataclass(frozen=True)
class MetricsSpec:
    """Baseline metric levels (means and noise), the diurnal swing and the alert threshold X."""

    cpu_mean: float = 35.0
    cpu_sd: float = 8.0
    mem_mean: float = 55.0
    mem_sd: float = 6.0
    bw_mean_mbps: float = 120.0
    bw_sd_mbps: float = 35.0
    diurnal_amplitude: float = 0.3
    bw_threshold_mbps: float = 600.0


@dataclass(frozen=True)
class CauseSpec:
    """A planted root cause: a combination of context values that produces incidents."""

    name: str
    kind: str
    rate_per_day: float
    users: tuple[str, ...]
    procs: tuple[str, ...]
    metric: str
    level: float
    duration_min: float
    lead_min: float
    resolution: str


@dataclass(frozen=True)
class LiveSpec:
    """Live delivery: out-of-order settings (as :class:`ReplayConfig`) and the speed-up."""

    out_of_order: float = 0.0
    min_delay_ms: float = 0.0
    max_delay_ms: float = 0.0
    distribution: str = "uniform"
    speedup: float = 1.0


@dataclass(frozen=True)
class ClusterConfig:
    """The whole scenario. Times are UTC; ``start_ns`` is the first instant of history."""

    seed: int = 42
    start_ns: int = 1_754_006_400_000_000_000  # 2025-08-01T00:00:00Z
    history_days: float = 60.0
    chunk_hours: float = 24.0
    block_minutes: float = 60.0
    servers: int = 24
    metrics_period_s: float = 10.0
    context_period_s: float = 60.0
    detect_min: float = 5.0
    metrics: MetricsSpec = MetricsSpec()
    users: tuple[tuple[str, float], ...] = (("alice", 0.6), ("bob", 0.5), ("carol", 0.4), ("ops", 0.3))
    procs: tuple[tuple[str, float], ...] = (("sshd", 1.0), ("cron", 1.0), ("nginx", 0.7), ("postgres", 0.5))
    causes: tuple[CauseSpec, ...] = ()
    live: LiveSpec = LiveSpec()
    source: str = "<defaults>"

    @property
    def block_ns(self) -> int:
        return int(round(self.block_minutes * 60e9))

    @property
    def history_end_ns(self) -> int:
        return self.start_ns + int(round(self.history_days * 86_400e9))


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> ScenarioConfigError:
        return ScenarioConfigError(f"{self.source}: key {key!r} {message}")

    def number(self, key: str, value: Any, lo: float | None = None, hi: float | None = None,
               strict_lo: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {value!r}")
        v = float(value)
        if lo is not None and (v < lo or (strict_lo and v == lo)):
            raise self.fail(key, f"must be {'>' if strict_lo else '>='} {lo:g}, got {value!r}")
        if hi is not None and v > hi:
            raise self.fail(key, f"must be <= {hi:g}, got {value!r}")
        return v

    def integer(self, key: str, value: Any, lo: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise self.fail(key, f"must be an integer >= {lo}, got {value!r}")
        return int(value)

    def text(self, key: str, value: Any, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def mapping(self, key: str, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a mapping, got {value!r}")
        return value

    def check_keys(self, where: str, raw: Mapping[str, Any], allowed: set[str]) -> None:
        for k in raw:
            if k not in allowed:
                name = f"{where}.{k}" if where else str(k)
                raise ScenarioConfigError(f"{self.source}: unknown key {name!r}")


def _pool(c: _Ctx, key: str, raw: Any) -> tuple[tuple[str, float], ...]:
    items = c.mapping(key, raw)
    return tuple((c.text(f"{key}.{name}", name), c.number(f"{key}.{name}", p, 0.0, 1.0))
                 for name, p in items.items())


def _names(c: _Ctx, key: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise c.fail(key, f"must be a list of names, got {raw!r}")
    return tuple(c.text(f"{key}[{i}]", v) for i, v in enumerate(raw))


def _cause(c: _Ctx, where: str, raw: Any) -> CauseSpec:
    m = c.mapping(where, raw)
    fields = {"name", "kind", "rate_per_day", "users", "procs", "metric", "level", "duration_min",
              "lead_min", "resolution"}
    c.check_keys(where, m, fields)
    for required in ("name", "kind", "rate_per_day", "metric", "level", "resolution"):
        if required not in m:
            raise c.fail(f"{where}.{required}", "is required")
    users = _names(c, f"{where}.users", m.get("users", []))
    procs = _names(c, f"{where}.procs", m.get("procs", []))
    if not users and not procs:
        raise c.fail(f"{where}.users", "and procs: a cause needs at least one context value")
    return CauseSpec(
        name=c.text(f"{where}.name", m["name"]), kind=c.text(f"{where}.kind", m["kind"], KINDS),
        rate_per_day=c.number(f"{where}.rate_per_day", m["rate_per_day"], 0.0),
        users=users, procs=procs, metric=c.text(f"{where}.metric", m["metric"], METRICS),
        level=c.number(f"{where}.level", m["level"], 0.0),
        duration_min=c.number(f"{where}.duration_min", m.get("duration_min", 20), 0.0, strict_lo=True),
        lead_min=c.number(f"{where}.lead_min", m.get("lead_min", 10), 0.0),
        resolution=c.text(f"{where}.resolution", m["resolution"]),
    )


def _section(c: _Ctx, name: str, raw: Any, default: Any, checks: dict[str, Callable[[str, Any], Any]]):
    m = c.mapping(name, raw)
    c.check_keys(name, m, set(checks))
    values = {k: checks[k](f"{name}.{k}", v) for k, v in m.items()}
    return type(default)(**{**default.__dict__, **values})


def _start_ns(c: _Ctx, value: Any) -> int:
    if isinstance(value, dt.datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise c.fail("start", f"must be an ISO 8601 UTC time, got {value!r}") from None
    else:
        raise c.fail("start", f"must be an ISO 8601 UTC time, got {value!r}")
    if ts.tzinfo is None:
        raise c.fail("start", f"must carry a time zone (e.g. Z), got {value!r}")
    return int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1_000


def parse_cluster_config(raw: Any, source: str = "<inline>") -> ClusterConfig:
    """Validate a parsed YAML mapping into a :class:`ClusterConfig` (missing keys: defaults)."""
    c = _Ctx(source)
    if raw is None:
        raw = {}
    m = c.mapping("<root>", raw)
    d = ClusterConfig()
    top = {"seed", "start", "history_days", "chunk_hours", "block_minutes", "servers", "metrics_period_s",
           "context_period_s", "detect_min", "metrics", "users", "procs", "causes", "live"}
    c.check_keys("", m, top)
    kw: dict[str, Any] = {"source": source}
    if "seed" in m:
        kw["seed"] = c.integer("seed", m["seed"], 0)
    if "start" in m:
        kw["start_ns"] = _start_ns(c, m["start"])
    for key in ("history_days", "chunk_hours", "block_minutes", "metrics_period_s", "context_period_s"):
        if key in m:
            kw[key] = c.number(key, m[key], 0.0, strict_lo=key != "history_days")
    if "detect_min" in m:
        kw["detect_min"] = c.number("detect_min", m["detect_min"], 0.0)
    if "servers" in m:
        kw["servers"] = c.integer("servers", m["servers"], 1)
    if "metrics" in m:
        kw["metrics"] = _section(c, "metrics", m["metrics"], d.metrics, {
            k: (lambda key, v: c.number(key, v, 0.0)) for k in MetricsSpec.__dataclass_fields__})
    for key in ("users", "procs"):
        if key in m:
            kw[key] = _pool(c, key, m[key])
    if "causes" in m:
        if not isinstance(m["causes"], list):
            raise c.fail("causes", f"must be a list, got {m['causes']!r}")
        causes = tuple(_cause(c, f"causes[{i}]", raw_c) for i, raw_c in enumerate(m["causes"]))
        names = [x.name for x in causes]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise c.fail(f"causes[{i}].name", f"repeats the cause name {name!r}")
        kw["causes"] = causes
    if "live" in m:
        kw["live"] = _section(c, "live", m["live"], d.live, {
            "out_of_order": lambda key, v: c.number(key, v, 0.0, 100.0),
            "min_delay_ms": lambda key, v: c.number(key, v, 0.0),
            "max_delay_ms": lambda key, v: c.number(key, v, 0.0),
            "distribution": lambda key, v: c.text(key, v, tuple(sorted(DISTRIBUTIONS))),
            "speedup": lambda key, v: c.number(key, v, 0.0, strict_lo=True),
        })
        if kw["live"].min_delay_ms > kw["live"].max_delay_ms:
            raise c.fail("live.min_delay_ms", f"({kw['live'].min_delay_ms:g}) exceeds live.max_delay_ms "
                                              f"({kw['live'].max_delay_ms:g})")
    cfg = ClusterConfig(**{**d.__dict__, **kw})
    for period in ("metrics_period_s", "context_period_s"):
        ratio = cfg.block_minutes * 60 / getattr(cfg, period)
        if abs(ratio - round(ratio)) > 1e-9:
            raise c.fail(period, f"must divide block_minutes * 60 = {cfg.block_minutes * 60:g} s evenly")
    return cfg


def load_cluster_config(path: str | os.PathLike[str]) -> ClusterConfig:
    """Read and validate a scenario YAML file."""
    path = str(path)
    if not os.path.isfile(path):
        raise SourceFileNotFound(f"no such scenario file: {path}")
    with open(path, encoding="utf-8") as fh:
        try:
            raw = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ScenarioConfigError(f"{path}: not valid YAML ({exc})") from None
    return parse_cluster_config(raw, path)
