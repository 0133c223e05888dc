"""Serving the API in a background thread (uvicorn), stoppable.

``serve(engine)`` binds the socket itself (so a taken port or a refused address is an
:class:`~moirae.api.auth.ApiError` at once, and port 0 picks a free port), starts
uvicorn on it in a daemon thread and returns once it accepts connections;
``server.stop()`` shuts it down, closing open SSE streams. With ``tls_cert`` and
``tls_key`` (``api.tls_cert``/``api.tls_key``, ``moirae run --tls-cert/--tls-key``) it
serves HTTPS only.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from moirae.api.auth import check_bind
from moirae.api.errors import ApiError
from moirae.runtime.errorlog import file_logger


class ApiServer:
    """A running uvicorn server over an app; ``url``, ``port``, ``stop()``."""

    def __init__(self, app, host: str, port: int, log_level: str = "warning", tls_cert: str | None = None,
                 tls_key: str | None = None) -> None:
        if bool(tls_cert) != bool(tls_key):
            raise ApiError("TLS needs both a certificate and its key (api.tls_cert and api.tls_key)")
        for what, path in (("certificate", tls_cert), ("key", tls_key)):
            if path and not Path(path).is_file():
                raise ApiError(f"the TLS {what} {path!r} is not a readable file")
        self.tls = bool(tls_cert)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise ApiError(f"cannot serve the API on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.app = app
        # uvicorn's own messages go to the API's log file, not the terminal (the alert
        # output of `moirae run`); the app's Guard already keeps tracebacks from it
        log = getattr(getattr(app, "state", None), "error_log", None)
        if log is not None:
            file_logger("uvicorn", log).setLevel(log_level.upper())
        config = uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False,
                                timeout_graceful_shutdown=2, log_config=None if log is not None else LOGGING_CONFIG,
                                ssl_certfile=tls_cert or None, ssl_keyfile=tls_key or None)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="moirae-api", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ApiError(f"the API server on {self.url} did not start")
            time.sleep(0.02)
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving; open SSE streams are closed. Idempotent."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():  # streaming clients holding on: force
            self._server.force_exit = True
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ApiServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(engine, host: str | None = None, port: int | None = None, token: str | None = None,
          keepalive: float = 5.0, tls_cert: str | None = None, tls_key: str | None = None) -> ApiServer:
    """Serve the API and console over ``engine`` on ``host:port`` (default: the
    engine's ``api`` settings; port 0 picks a free one) in a background thread, over
    HTTPS with ``tls_cert``/``tls_key`` (default: ``api.tls_cert``/``api.tls_key``).
    Refuses a non-loopback host without a token."""
    from moirae.api.app import create_app

    cfg = engine.settings.api
    host = cfg.host if host is None else host
    port = cfg.port if port is None else port
    token = cfg.token if token is None else token
    tls_cert = (getattr(cfg, "tls_cert", "") or None) if tls_cert is None else tls_cert
    tls_key = (getattr(cfg, "tls_key", "") or None) if tls_key is None else tls_key
    check_bind(host, token)
    app = create_app(engine, token=token, host=host, keepalive=keepalive, tls=bool(tls_cert))
    return ApiServer(app, host, port, tls_cert=tls_cert, tls_key=tls_key).start()
