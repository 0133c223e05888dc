"""A network blackhole to an external PostgreSQL mid-stream.

The archive writes to the server at 127.0.0.1:5432 through a TCP proxy on loopback that
this test controls. Mid-COPY of a micro-batch the proxy goes silent: it forwards nothing
more either way and stops reading (its receive window closes, as a vanished peer's
does: nothing is acknowledged, nothing is refused, no reset ever comes), and new
connections are accepted but never answered. Without client-side timeouts the append
would wait forever; with them (``archive.pg.client_timeouts``: ``tcp_user_timeout``,
keepalives, ``connect_timeout``) the connection fails within the timeout, the engine's
retry path takes over, and once the proxy forwards again every batch is archived once.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import psycopg2.extensions
import pytest

from archive import Archiver
from archive.pg import Database
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.slow]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
TIMEOUT_S = 3
HOLD_S = 2 * TIMEOUT_S + 2  # long enough that only a timeout ends the wait
BATCHES, ROWS = 12, 4000  # a batch's COPY is ~200 KB: far more than the proxy's closed window


class SilentProxy:
    """A TCP proxy to ``upstream`` on 127.0.0.1:<port>. :meth:`arm` makes it go silent
    at the next large client write (a COPY under way) until :meth:`release`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # accepted sockets inherit it
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.armed = False
        self.silent = threading.Event()
        self.silent_at: float | None = None
        self.stopping = False
        self.pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def arm(self) -> None:
        self.armed = True

    def release(self) -> None:
        """Forward again: the silent connections are dropped (their clients gave up)."""
        for client, server in self.pairs:
            for s in (client, server):
                if s is not None:
                    s.close()
        self.pairs = []
        self.silent.clear()

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        self.release()
        self.listener.close()

    def _run(self) -> None:
        while not self.stopping:
            socks = [self.listener] + ([] if self.silent.is_set() else
                                       [s for pair in self.pairs for s in pair if s is not None])
            try:
                ready, _, _ = select.select(socks, [], [], 0.05)
            except (OSError, ValueError):
                continue
            for s in ready:
                if s is self.listener:
                    client, _ = self.listener.accept()
                    server = None if self.silent.is_set() else socket.create_connection(self.upstream)
                    self.pairs.append((client, server))  # silent: accepted, never answered
                    continue
                self._pump(s)

    def _pump(self, s: socket.socket) -> None:
        pair = next((p for p in self.pairs if s in p), None)
        if pair is None or pair[1] is None:
            return
        client, server = pair
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.pairs.remove(pair)
            client.close()
            server.close()
            return
        if self.armed and s is client and len(data) >= 1024:  # mid-COPY: go silent now
            self.armed = False
            self.silent_at = time.monotonic()
            self.silent.set()
            return  # this chunk is swallowed; nothing more is read or forwarded
        (server if s is client else client).sendall(data)


def _batch(i: int) -> pd.DataFrame:
    n = np.arange(i * ROWS, (i + 1) * ROWS)
    return pd.DataFrame({"ts": [T0 + timedelta(seconds=int(k)) for k in n], "sid": [f"s{k % 7}" for k in n],
                         "bw": np.random.default_rng(i).normal(50, 10, ROWS), "n": n})


def test_a_blackholed_server_mid_copy_enters_the_retry_path_within_the_timeout(pg_dsn, monkeypatch):
    if pg_dsn.startswith("postgresql://") or "host=127.0.0.1" not in pg_dsn:
        pytest.skip("one backend is enough: the proxy sits in front of the external server's TCP port")
    params = psycopg2.extensions.parse_dsn(pg_dsn)
    proxy = SilentProxy((params.get("host", "127.0.0.1"), int(params.get("port", 5432))))
    monkeypatch.setenv("MOIRAE_PG_CLIENT_TIMEOUT_S", str(TIMEOUT_S))
    params.update(host="127.0.0.1", port=str(proxy.port))
    params.pop("connect_timeout", None)  # the client timeouts under test set it
    dsn = " ".join(f"{k}={v}" for k, v in params.items())
    db = Database(dsn, schema=f"bh_{uuid.uuid4().hex[:12]}", retry_seconds=60)
    try:
        arch = Archiver(db, ArchiveSettings(chunk_span=timedelta(hours=1)))
        arch.register_stream(StreamSpec.build("m", "ts", {"sid": "text", "bw": "double", "n": "bigint"}))
        detected: list[float] = []
        done: list[int] = []
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(BATCHES):
                    arch.append("m", i, _batch(i))
                    done.append(i)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        while len(done) < 3 and writer.is_alive():
            time.sleep(0.01)
        proxy.arm()
        assert proxy.silent.wait(30), "the proxy never saw a COPY to blackhole"
        while db.health.current is None and time.monotonic() - proxy.silent_at < 4 * TIMEOUT_S:
            time.sleep(0.05)
        if db.health.current is not None:
            detected.append(time.monotonic() - proxy.silent_at)
        rest = HOLD_S - (time.monotonic() - proxy.silent_at)
        time.sleep(max(0.0, rest))
        proxy.release()
        writer.join(120)
        assert not writer.is_alive() and not errors, errors
        assert detected, f"no retry began within {4 * TIMEOUT_S} s of the blackhole (the write hung)"
        assert detected[0] <= TIMEOUT_S + 3, f"the retry began {detected[0]:.1f} s after the blackhole"
        outage = db.health.report()["outages"][-1]
        assert outage["retries"] >= 1
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*), count(DISTINCT n), min(n), max(n) FROM m")
            assert cur.fetchone() == (BATCHES * ROWS, BATCHES * ROWS, 0, BATCHES * ROWS - 1)
        print(f"blackhole: retry path entered after {detected[0]:.2f} s (timeout {TIMEOUT_S} s), "
              f"{outage['retries']} retries, outage {outage['start']} .. {outage['end']}")
    finally:
        proxy.release()
        try:
            db.drop_schema()
        finally:
            db.close()
            proxy.close()
