"""A small HTTP client of the API, for the steering commands (``moirae cancel`` /
``moirae accelerate``): stdlib only, so the CLI stays fast to start.

The address comes from the configuration (``api.host``, ``api.port``; a wildcard bind
address is reached on loopback; ``https`` when ``api.tls_cert`` is set), the token from
``MOIRAE_API_TOKEN``, ``api.token``, or the engine's local token file
(``<data_dir>/api.token``, :func:`moirae.api.access.local_token`).
Every failure is a :class:`ClientError` with one line saying why.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from moirae.api.errors import ClientError, NoEngine

__all__ = ["ENV_TOKEN", "ApiClient", "ClientError", "NoEngine", "base_url"]

ENV_TOKEN = "MOIRAE_API_TOKEN"


def base_url(settings) -> str:
    scheme = "https" if getattr(settings.api, "tls_cert", "") else "http"
    host = settings.api.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{settings.api.port}"


class ApiClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0, cafile: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # https: the server's own certificate is trusted (a self-signed one included)
        self.context = ssl.create_default_context(cafile=cafile) if cafile else None

    @classmethod
    def from_settings(cls, settings) -> ApiClient:
        return cls(base_url(settings), os.environ.get(ENV_TOKEN) or settings.api.token or _local_token(settings),
                   cafile=getattr(settings.api, "tls_cert", "") or None)

    def request(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ClientError(f"{method} {path}: HTTP {exc.code}: {_detail(exc)}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise NoEngine(f"no engine is running: nothing listens at {self.url} (connection refused)") from None
            raise ClientError(f"cannot reach the engine at {self.url}: {reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise ClientError(f"cannot reach the engine at {self.url}: {exc}") from None

    def cancel(self, eid: str) -> dict[str, Any]:
        return self.request("POST", f"/api/events/{urllib.parse.quote(eid, safe='')}/cancel")

    def cancel_many(self, eids: list[str]) -> dict[str, Any]:
        return self.request("POST", "/api/events/cancel", {"eids": list(eids)})

    def accelerate(self, eid: str, tickets: int | None = None) -> dict[str, Any]:
        body = None if tickets is None else {"tickets": tickets}
        return self.request("POST", f"/api/events/{urllib.parse.quote(eid, safe='')}/accelerate", body)


def _local_token(settings) -> str | None:
    """The engine's local token (``<data_dir>/api.token``), if the engine made one."""
    try:
        return (Path(settings.data_dir) / "api.token").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(exc.read()).get("detail")
    except (ValueError, AttributeError, OSError):
        return exc.reason or "error"
    if isinstance(detail, list):  # FastAPI's validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)
