"""Secure by default (moirae.api.access, limits, audit, guard's body cap, server's TLS):
mutations need the token or a same-origin console session with its CSRF token, even on
loopback; Host and Origin are checked; off loopback reads need the token; bodies are
capped; mutations are rate limited and audited; status answers are redacted; HTTPS."""

from __future__ import annotations

import re
import socket
import ssl
import stat
import subprocess
import urllib.request

import psycopg2
import pytest
from fastapi.testclient import TestClient

from moirae.api import ApiError, create_app, serve
from moirae.api.access import SESSION_COOKIE
from moirae.api.limits import RateLimiter
from tests.api.api_helpers import add_event, suspended, wait_for
from tests.api.api_helpers import client as api_client

# the rules are the API's, the same on either backend: one is enough
pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]
LOCAL = "http://127.0.0.1"


def console_session(client: TestClient) -> str:
    """Load the console page as a browser would: its cookie stays in ``client``; returns the CSRF token."""
    page = client.get("/")
    assert page.status_code == 200 and SESSION_COOKIE in page.cookies
    return re.search(r'<meta name="moirae-csrf" content="([^"]+)">', page.text).group(1)


def test_on_loopback_without_a_token_mutations_need_the_local_token_or_a_console_session(engine):
    add_event(engine, "a", 170)
    wait_for(lambda: suspended(engine, "a"), what="suspended")
    app = create_app(engine, token="")
    anon = TestClient(app, base_url=LOCAL)
    assert anon.post("/api/events/a/accelerate").status_code == 401
    assert anon.post("/api/incidents/a/acknowledge").status_code == 401
    assert anon.get("/api/events/a").status_code == 200  # reads stay open on loopback

    token_file = engine.data_dir / "api.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(engine.data_dir.stat().st_mode) == 0o700
    local = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    assert anon.post("/api/events/a/accelerate", json={"tickets": 3}, headers=local).status_code == 200

    csrf = console_session(anon)  # the console page: a session cookie and its CSRF token
    assert anon.post("/api/events/a/accelerate").status_code == 403  # the cookie alone is not enough
    assert anon.post("/api/events/a/accelerate", headers={"X-CSRF-Token": csrf + "x"}).status_code == 403
    ok = anon.post("/api/incidents/a/acknowledge", json={"by": "ops"}, headers={"X-CSRF-Token": csrf})
    assert ok.status_code == 200, ok.text
    other = TestClient(app, base_url=LOCAL)  # a CSRF token without its cookie
    assert other.post("/api/events/a/accelerate", headers={"X-CSRF-Token": csrf}).status_code == 401
    assert anon.post("/api/events/a/cancel", headers={"X-CSRF-Token": csrf}).json()["cancelled"] == 1

    records = anon.get("/api/audit").json()["records"]
    assert [(r["actor"], r["action"], r["target"]) for r in records] == [
        ("console", "cancel", "a"), ("console:ops", "acknowledge", "a"), ("token", "accelerate", "a")]
    assert records[-1]["detail"]["tickets"] == 3 and records[0]["detail"]["client"]


def test_dns_rebinding_is_refused_unless_allowed_hosts_names_it(engine_factory):
    e = engine_factory(api={"allowed_hosts": ["moirae.lan"]})
    try:
        app = create_app(e)
        token = {"Authorization": f"Bearer {app.state.access.token}"}
        for base in ("http://rebind.attacker.example:8642", "http://localhost.attacker.example"):
            c = TestClient(app, base_url=base)
            for res in (c.get("/api/events"), c.get("/"), c.post("/api/events/x/cancel", headers=token)):
                assert res.status_code == 403 and "allowed_hosts" in res.json()["detail"], (base, res.text)
        for base in ("http://moirae.lan:8642", "http://localhost:8642", "http://[::1]:8642", "http://10.1.2.3"):
            assert TestClient(app, base_url=base).get("/api/events").status_code == 200, base
    finally:
        e.close()


def test_another_origin_can_neither_read_nor_post_even_with_the_session(engine):
    app = create_app(engine)
    c = TestClient(app, base_url=LOCAL)
    csrf = console_session(c)
    evil = {"Origin": "http://evil.example", "X-CSRF-Token": csrf}
    assert c.post("/api/incidents/x/acknowledge", headers=evil).status_code == 403
    assert c.get("/api/events", headers={"Origin": "http://evil.example"}).status_code == 403
    assert c.get("/api/events", headers={"Origin": "null"}).status_code == 403
    assert c.get("/api/events", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    same = c.post("/api/incidents/x/acknowledge", headers={"Origin": LOCAL, "X-CSRF-Token": csrf})
    assert same.status_code == 404  # allowed through to the route: no such incident


def test_off_loopback_reads_need_the_token_or_a_session(engine):
    app = create_app(engine, token="t0k", host="0.0.0.0")
    c = TestClient(app, base_url="http://192.0.2.7:8642")
    for path in ("/api/events", "/api/status", "/api/stream", "/openapi.json", "/api/audit"):
        assert c.get(path).status_code == 401, path
    page = c.get("/")
    assert page.status_code == 200 and SESSION_COOKIE not in page.cookies and "<meta name=\"moirae-csrf\"" not in page.text
    assert c.post("/api/session").status_code == 401
    csrf = c.post("/api/session", headers={"Authorization": "Bearer t0k"}).json()["csrf"]  # the console's exchange
    assert c.get("/api/events").status_code == 200  # the session cookie now
    assert c.post("/api/incidents/x/acknowledge", headers={"X-CSRF-Token": csrf}).status_code == 404


def test_bodies_are_capped_and_mutations_rate_limited(engine):
    app = create_app(engine)
    c = api_client(app)
    big = b'{"eids": ["' + b"a" * (2 << 20) + b'"]}'
    res = c.post("/api/events/cancel", content=big, headers={"Content-Type": "application/json"})
    assert res.status_code == 413 and "larger than" in res.json()["detail"]

    def chunked():
        for _ in range(3):
            yield b"x" * (600 << 10)
    assert c.post("/api/events/cancel", content=chunked()).status_code == 413  # no Content-Length

    app.state.access.limiter = RateLimiter(per_second=0.01, burst=3)
    codes = [c.post("/api/incidents/none/acknowledge").status_code for _ in range(5)]
    assert codes == [404, 404, 404, 429, 429]
    limited = c.post("/api/incidents/none/acknowledge")
    assert int(limited.headers["Retry-After"]) >= 1 and "too many" in limited.json()["detail"]
    assert c.get("/api/events").status_code == 200  # reads are not limited


def test_status_and_outages_never_show_a_password(engine):
    secret = "hunter2-Zq"
    dsn = f"host=db.internal port=5432 user=moirae password='{secret} x' dbname=m"
    engine.db.health.failed("connect", psycopg2.OperationalError(f"could not connect: {dsn}"))
    with engine.db.connection() as conn, conn.cursor() as cur:  # a row written before redaction existed
        cur.execute("CREATE TABLE IF NOT EXISTS moirae_outages (id bigserial PRIMARY KEY, start_ts timestamptz NOT NULL, "
                    "end_ts timestamptz NOT NULL, retries int NOT NULL, during text, last_error text)")
        cur.execute("INSERT INTO moirae_outages (start_ts, end_ts, retries, during, last_error) "
                    "VALUES (now(), now(), 1, 'connect', %s)", (f"postgresql://moirae:{secret}@db/m down",))
    text = api_client(create_app(engine)).get("/api/status").text
    assert secret not in text and "password=***" in text and "moirae:***@db" in text
    with engine.db.connection() as conn, conn.cursor() as cur:  # the outage ended with the first answer
        cur.execute("SELECT last_error FROM moirae_outages WHERE last_error LIKE 'could not connect%'")
        stored = [r[0] for r in cur.fetchall()]
    assert len(stored) == 1 and secret not in stored[0] and "password=***" in stored[0]  # written redacted


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem")], check=True, capture_output=True)
    return str(d / "cert.pem"), str(d / "key.pem")


def test_tls_serves_https_only(engine_factory, certificate):
    cert, key = certificate
    e = engine_factory(api={"tls_cert": cert, "tls_key": key, "port": 0})
    try:
        with pytest.raises(ApiError, match="both a certificate and its key"):
            serve(e, host="127.0.0.1", port=0, tls_key="")
        with serve(e, host="127.0.0.1", port=0) as server:
            assert server.url.startswith("https://")
            ctx = ssl.create_default_context(cafile=cert)
            with urllib.request.urlopen(server.url + "/api/events", context=ctx, timeout=10) as resp:
                assert resp.status == 200
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:  # plain HTTP: no answer
                plain.sendall(b"GET /api/events HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                assert not plain.recv(100).startswith(b"HTTP/")
            page = urllib.request.urlopen(server.url + "/", context=ctx, timeout=10)
            assert "Secure" in page.headers["set-cookie"] and "SameSite=strict" in page.headers["set-cookie"]
    finally:
        e.close()


def test_the_console_command_takes_tls_options(engine, certificate, tmp_path, capsys, monkeypatch):
    import json

    from moirae.cli.main import main

    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    cert, key = certificate
    s = engine.settings
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"data_dir": str(s.data_dir), "postgres": {"dsn": engine.db.dsn,
                                                                         "schema": s.postgres.schema}}))
    assert main(["console", "--config", str(cfg), "--port", "0", "--duration", "0.5",
                 "--tls-cert", cert, "--tls-key", key]) == 0
    assert "console on https://127.0.0.1:" in capsys.readouterr().out
