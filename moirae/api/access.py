"""Who may do what over HTTP: the token, console sessions, CSRF, Host and Origin.

Every request passes :class:`Gate` (an ASGI middleware) first:

- **Host** must be a loopback name (``localhost``), an IP literal, the bind address or
  one of ``api.allowed_hosts``. A DNS-rebinding page reaches the server under its own
  domain name, which is none of these: 403, before any route runs.
- **Origin** (and ``Sec-Fetch-Site: cross-site``), when the browser sends it, must be
  this server's own origin: a page on another origin can neither read nor post (403).
- **Off loopback** every request but the console's page needs the token or a console
  session (401).

Mutating routes depend on :meth:`Access.mutate`: the bearer token, or a same-origin
console session whose ``X-CSRF-Token`` header matches its cookie, on every address,
loopback too; rate limited per client (429, :mod:`moirae.api.limits`). Machine
receivers depend on :meth:`Access.machine` (the bearer token only, no rate limit).

The token is ``api.token`` when configured, else the engine's *local token*, kept in
``<data_dir>/api.token`` (created ``0600``): the CLI (``moirae cancel``) reads it there.
The console's page, served on loopback, sets a session cookie (HttpOnly, SameSite=Strict)
and carries its CSRF token; off loopback the console exchanges the typed token for a
session (``POST /api/session``). Sessions are HMACs under a key derived from the token,
so they survive a restart of the engine and die with a new token.

>>> host_name("[::1]:8642"), host_name("Example.COM:80"), host_name("127.0.0.1")
('::1', 'example.com', '127.0.0.1')
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from pathlib import Path

from fastapi import HTTPException, Request

from moirae.api.auth import is_loopback, token_matches
from moirae.api.limits import RateLimiter

TOKEN_FILE = "api.token"
SESSION_COOKIE = "moirae_session"
CSRF_HEADER = "x-csrf-token"
LOOPBACK_NAMES = {"localhost", "localhost.", "127.0.0.1", "::1"}


def local_token(data_dir: str | os.PathLike[str]) -> str:
    """The engine's local API token in ``<data_dir>/api.token``, created (``0600``, 256
    random bits) on first use."""
    path = Path(data_dir) / TOKEN_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token


def host_name(host_header: str) -> str:
    """The host of a ``Host`` header, lower-case, without port or brackets."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1:].split("]", 1)[0]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Access:
    """The access rules of one app (see the module doc)."""

    def __init__(self, token: str, bind_host: str, allowed_hosts: tuple[str, ...] = (), tls: bool = False,
                 limiter: RateLimiter | None = None) -> None:
        self.token = token
        self.loopback = is_loopback(bind_host)
        self.tls = tls
        self.allowed = {h.lower() for h in (*LOOPBACK_NAMES, bind_host, *allowed_hosts) if h}
        self.limiter = limiter or RateLimiter()
        self._key = hmac.new(token.encode(), b"moirae console session", hashlib.sha256).digest()

    # -- sessions -----------------------------------------------------------------------
    def new_session(self) -> tuple[str, str]:
        """A new console session: (cookie value, its CSRF token)."""
        nonce = secrets.token_urlsafe(18)
        cookie = f"{nonce}.{self._mac('session:' + nonce)}"
        return cookie, self.csrf_of(cookie)

    def csrf_of(self, cookie: str) -> str:
        return self._mac("csrf:" + cookie)

    def session_ok(self, cookie: str | None) -> bool:
        if not cookie or "." not in cookie:
            return False
        nonce, mac = cookie.rsplit(".", 1)
        return hmac.compare_digest(mac, self._mac("session:" + nonce))

    def _mac(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:40]

    def set_cookie(self, response, cookie: str) -> None:
        response.set_cookie(SESSION_COOKIE, cookie, httponly=True, samesite="strict", secure=self.tls, path="/")

    # -- dependencies -------------------------------------------------------------------
    def bearer_ok(self, request: Request) -> bool:
        return token_matches(request.headers.get("authorization"), self.token)

    def mutate(self, request: Request) -> str:
        """The dependency of mutating routes: the token, or a console session with its CSRF
        token; then the rate limit. Returns (and stores in ``request.state.actor``) who acts."""
        if self.bearer_ok(request):
            actor = "token"
        else:
            cookie = request.cookies.get(SESSION_COOKIE)
            if not self.session_ok(cookie):
                raise HTTPException(401, "missing or wrong bearer token (or console session)",
                                    headers={"WWW-Authenticate": "Bearer"})
            given = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(given.encode(), self.csrf_of(cookie).encode()):
                raise HTTPException(403, "the console session's CSRF token is missing or wrong: reload the console")
            actor = "console"
        client = request.client.host if request.client else "?"
        wait = self.limiter.take(f"{actor}@{client}")
        if wait is not None:
            raise HTTPException(429, f"too many changes from {client}: retry in {wait:.1f} s",
                                headers={"Retry-After": str(max(1, round(wait)))})
        request.state.actor = actor
        return actor

    def machine(self, request: Request) -> str:
        """The dependency of machine receivers: the bearer token only."""
        if not self.bearer_ok(request):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        request.state.actor = "token"
        return "token"

    # -- the gate -----------------------------------------------------------------------
    def refusal(self, scope: dict) -> tuple[int, str] | None:
        """Why the gate refuses a request (status, reason), or None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "")
        name = host_name(host)
        if not name or not (name in self.allowed or _is_ip(name)):
            return 403, (f"Host {host!r} is not served here (a DNS-rebinding page?); "
                         "list the name in api.allowed_hosts to serve it")
        origin = headers.get("origin")
        scheme = "https" if self.tls else "http"
        if origin is not None and origin.rstrip("/").lower() != f"{scheme}://{host.lower()}":
            return 403, f"requests from origin {origin!r} are refused (the console's own origin only)"
        if headers.get("sec-fetch-site") == "cross-site":
            return 403, "cross-site requests are refused"
        if self.loopback or (scope.get("method") == "GET" and scope.get("path") == "/"):
            return None
        if token_matches(headers.get("authorization"), self.token):
            return None
        cookie = _cookie(headers.get("cookie", ""), SESSION_COOKIE)
        if self.session_ok(cookie):
            return None
        return 401, "off loopback every request needs the bearer token (or a console session)"


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


class Gate:
    """The ASGI middleware applying :meth:`Access.refusal` to every HTTP request."""

    def __init__(self, app, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refused = self.access.refusal(scope)
            if refused is not None:
                status, reason = refused
                data = json.dumps({"detail": reason}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
                if status == 401:
                    headers.append((b"www-authenticate", b"Bearer"))
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": data})
                return
        await self.app(scope, receive, send)
