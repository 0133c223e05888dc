"""A webhook receiver for the delivery tests: a real HTTP server on loopback that
verifies each request's HMAC signature and answers a scripted status per request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from moirae.delivery.signing import verify


class Receiver:
    """Records ``(verified, body)`` per request; ``statuses`` are answered in order
    (then 200)."""

    def __init__(self, secret: str = "", statuses: list[int] | None = None) -> None:
        self.secret, self.statuses = secret, list(statuses or [])
        self.requests: list[tuple[bool, dict]] = []
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = (verify(outer.secret, body, self.headers.get("X-Moirae-Timestamp"),
                             self.headers.get("X-Moirae-Signature")) if outer.secret else True)
                with outer.cond:
                    outer.requests.append((ok, json.loads(body)))
                    status = outer.statuses.pop(0) if outer.statuses else 200
                    outer.cond.notify_all()
                self.send_response(status if ok else 401)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, timeout: float = 30) -> list[tuple[bool, dict]]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.requests) >= n, timeout)
            return list(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
