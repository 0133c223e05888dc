"""Auth: loopback by default; beyond it a token is required to start at all, and
mutating calls then need ``Authorization: Bearer <token>`` (401 otherwise). A token
configured on loopback is required too. Reads stay open on loopback only (the rest of the
access rules: tests/api/test_access.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from moirae import config
from moirae.api import ApiError, create_app, serve
from moirae.api.auth import token_matches
from moirae.config import ConfigError
from tests.api.api_helpers import add_event, suspended, wait_for

TOKEN = "s3cret-token"


def test_config_refuses_a_public_host_without_a_token():
    with pytest.raises(ConfigError, match="requires api.token"):
        config.load(None, {"api": {"host": "0.0.0.0"}})
    assert config.load(None, {"api": {"host": "0.0.0.0", "token": TOKEN}}).api.token == TOKEN


@pytest.mark.postgres
def test_server_refuses_to_start_off_loopback_without_a_token(engine):
    with pytest.raises(ApiError, match="beyond localhost"):
        serve(engine, host="0.0.0.0", port=0, token="")
    with pytest.raises(ApiError, match="beyond localhost"):
        create_app(engine, token="", host="192.0.2.10")


@pytest.mark.postgres
@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_mutations_need_the_bearer_token(engine, host):
    add_event(engine, "a", 170)
    wait_for(lambda: suspended(engine, "a"), what="suspended")
    client = TestClient(create_app(engine, token=TOKEN, host=host), base_url="http://127.0.0.1")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": TOKEN}, {"Authorization": f"Bearer {TOKEN}x"}):
        for path in ("/api/events/a/cancel", "/api/events/a/accelerate", "/api/events/nope/cancel"):
            res = client.post(path, headers=headers)
            assert res.status_code == 401, (path, headers, res.text)
            assert res.headers["www-authenticate"] == "Bearer"
        res = client.post("/api/events/cancel", json={"eids": ["a"]}, headers=headers)
        assert res.status_code == 401, (headers, res.text)
    assert [t.tickets for t in engine.deploy.manager.tasks("a")] == [100]  # nothing changed
    read = {"Authorization": f"Bearer {TOKEN}"} if host == "0.0.0.0" else {}  # off loopback reads need it
    assert client.get("/api/events/a", headers=read).status_code == 200
    assert client.get("/api/scheduler/tasks", headers=read).status_code == 200
    if host == "0.0.0.0":
        assert client.get("/api/events/a").status_code == 401
    ok = client.post("/api/events/a/accelerate", json={"tickets": 7}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json()["changed"] is True
    assert client.post("/api/events/a/cancel", headers={"Authorization": f"bearer {TOKEN}"}).json()["cancelled"] == 1


@given(given_token=st.text(min_size=0, max_size=20), real=st.text(min_size=1, max_size=20).filter(str.strip))
def test_only_the_exact_token_matches(given_token, real):
    real = real.strip()
    assert token_matches(f"Bearer {real}", real)
    assert token_matches(f"Bearer {given_token}", real) == (given_token.strip() == real)
    assert not token_matches(f"Token {real}", real)
