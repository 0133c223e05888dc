"""Alert targets, as a monitor's ``alerts:`` section or :meth:`moirae.Engine.route_alerts`
declares them.

Each target is a dict with a ``kind``:

- ``webhook``: ``url``; ``secret`` (HMAC-SHA256 key: every request is signed,
  :mod:`moirae.delivery.signing`); ``format`` ``json`` (default) or ``slack``;
- ``slack``: ``url`` (a Slack incoming webhook, or anything taking its payload);
- ``alertmanager``: ``url`` (the Alertmanager's base URL); ``labels`` (added to every
  alert); ``resend`` (how often a firing alert is posted again so Alertmanager keeps it,
  default ``60s``).

Every kind also takes ``retries`` (tries after the first, default 4), ``backoff`` (the
first wait between tries, doubled each time, default ``1s``), ``timeout`` (per request,
default ``5s``) and ``console_url`` (the console's base URL in links; default the
engine's API address).

>>> [t.kind for t in parse_targets([{"kind": "slack", "url": "http://h/x"}])]
['webhook']
>>> parse_targets([{"kind": "pager", "url": "http://h"}])
Traceback (most recent call last):
...
moirae.delivery.errors.DeliveryConfigError: alerts[0].kind: must be one of webhook, slack, alertmanager, got 'pager'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from moirae.base.durations import parse_duration
from moirae.delivery.errors import DeliveryConfigError

KINDS = ("webhook", "slack", "alertmanager")
_COMMON = {"kind", "url", "retries", "backoff", "timeout", "console_url"}
_KEYS = {"webhook": _COMMON | {"secret", "format"}, "slack": _COMMON, "alertmanager": _COMMON | {"labels", "resend"}}


@dataclass(frozen=True)
class Target:
    """One place alerts go. ``kind`` is ``webhook`` (with ``format`` json or slack) or
    ``alertmanager``."""

    kind: str
    url: str
    secret: str = ""
    format: str = "json"
    labels: dict[str, str] = field(default_factory=dict)
    retries: int = 4
    backoff: float = 1.0
    timeout: float = 5.0
    resend: float = 60.0
    console_url: str = ""

    @property
    def name(self) -> str:
        """How dead letters and metrics name the target (its URL without credentials)."""
        u = urlparse(self.url)
        return f"{self.kind}:{u.scheme}://{u.hostname or ''}{f':{u.port}' if u.port else ''}{u.path}"

    def __hash__(self) -> int:
        return hash((self.kind, self.url, self.format))


def _seconds(value: Any, where: str) -> float:
    try:
        return parse_duration(value).total_seconds() if isinstance(value, str) else float(value)
    except (ValueError, TypeError) as exc:
        raise DeliveryConfigError(f"{where}: not a duration: {value!r} ({exc})") from None


def parse_target(spec: Any, where: str = "alerts[0]") -> Target:
    if isinstance(spec, Target):
        return spec
    if not isinstance(spec, dict):
        raise DeliveryConfigError(f"{where}: a target is a mapping with 'kind' and 'url', got {spec!r}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise DeliveryConfigError(f"{where}.kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    unknown = sorted(set(spec) - _KEYS[kind])
    if unknown:
        raise DeliveryConfigError(f"{where}: unknown key(s) for a {kind} target: {', '.join(unknown)}")
    url = spec.get("url")
    if not isinstance(url, str) or urlparse(url).scheme not in ("http", "https") or not urlparse(url).hostname:
        raise DeliveryConfigError(f"{where}.url: must be an http(s) URL, got {url!r}")
    kw: dict[str, Any] = {"kind": "alertmanager" if kind == "alertmanager" else "webhook", "url": url.rstrip("/")
                          if kind == "alertmanager" else url}
    if kind == "slack":
        kw["format"] = "slack"
    if "format" in spec:
        if spec["format"] not in ("json", "slack"):
            raise DeliveryConfigError(f"{where}.format: must be json or slack, got {spec['format']!r}")
        kw["format"] = spec["format"]
    if "secret" in spec:
        if not isinstance(spec["secret"], str):
            raise DeliveryConfigError(f"{where}.secret: must be text")
        kw["secret"] = spec["secret"]
    if "labels" in spec:
        labels = spec["labels"]
        if not isinstance(labels, dict) or not all(isinstance(k, str) and k for k in labels):
            raise DeliveryConfigError(f"{where}.labels: must be a mapping of label names to values")
        kw["labels"] = {k: str(v) for k, v in labels.items()}
    if "retries" in spec:
        r = spec["retries"]
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= 20:
            raise DeliveryConfigError(f"{where}.retries: must be a whole number within 0-20, got {r!r}")
        kw["retries"] = r
    for key in ("backoff", "timeout", "resend"):
        if key in spec:
            v = _seconds(spec[key], f"{where}.{key}")
            if not 0 <= v <= 86400 or (key != "backoff" and v == 0):
                raise DeliveryConfigError(f"{where}.{key}: out of range: {spec[key]!r}")
            kw[key] = v
    if "console_url" in spec:
        kw["console_url"] = str(spec["console_url"]).rstrip("/")
    return Target(**kw)


def parse_targets(specs: Any, where: str = "alerts") -> list[Target]:
    """Checked targets; :class:`DeliveryConfigError` names the index and key at fault."""
    if isinstance(specs, dict):
        specs = [specs]
    if not isinstance(specs, list | tuple):
        raise DeliveryConfigError(f"{where}: a list of targets, got {specs!r}")
    return [parse_target(s, f"{where}[{i}]") for i, s in enumerate(specs)]
