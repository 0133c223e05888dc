"""Retraction fronts without Spark: the API's refusals (one line each, nothing changed,
the refusal audited), forward lookup, the read-only console (409 on retract), and the
CLI's own refusals (moirae/api/retract_api.py, moirae/cli/commands/retract.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from archive import StreamSpec
from moirae.api import ReadOnlyEngine, create_app
from tests.api.api_helpers import client as api_client

T0 = datetime(2026, 3, 1, tzinfo=UTC)
pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(engine_factory):
    """An engine (never started: no Spark) whose archive holds ``metrics`` (1000 rows)."""
    e = engine_factory(archive={"chunk_span": "10m", "chunk_target_rows": 0})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}))
    n = 1000
    e.archiver.append("metrics", -1, pd.DataFrame({
        "ts": pd.date_range(T0, periods=n, freq="10s"), "sid": [f"s{i % 4}" for i in range(n)],
        "bw": np.arange(n, dtype="float64")}), bulk=True)
    yield e
    e.close()


def test_refusals_lookup_and_the_read_only_console(engine):
    client = api_client(create_app(engine))
    cases = [
        ({"stream": "nope", "predicate": "bw > 1"}, "unknown stream 'nope'"),
        ({"stream": "metrics", "predicate": "nope > 1"}, "unknown column 'nope'"),
        ({"stream": "metrics", "predicate": "bw in (select bw from metrics)"}, "subquery"),
        ({"stream": "metrics", "predicate": "pg_sleep(10) is null"}, "function 'pg_sleep'"),
        ({"stream": "metrics", "predicate": "bw >= 0"}, "confirm"),  # all of it
        ({"stream": "metrics", "key": {"sid": "s1"}, "predicate": "bw > 1"}, "one way"),
        ({"ids": [1]}, "names no archived row"),
    ]
    for body, words in cases:
        res = client.post("/api/retractions", json={**body, "reason": "bad feed"})
        assert res.status_code == 422, res.text
        detail = res.json()["detail"]
        assert words in detail and "\n" not in detail
    assert api_client(create_app(engine), token=False).post(
        "/api/retractions", json={"stream": "metrics", "predicate": "bw > 998", "reason": "x"}).status_code == 401
    assert client.post("/api/retractions/7/undo").status_code == 404
    assert client.get("/api/retractions").json() == {"retractions": []}
    refused = [r for r in client.get("/api/audit").json()["records"] if r["action"] == "retraction refused"]
    assert len(refused) == len(cases)
    # a small one goes through: 2 rows, no alert fed them
    ok = client.post("/api/retractions", json={"stream": "metrics", "predicate": "bw > 997.5", "reason": "x",
                                               "by": "ann"}).json()
    assert (ok["rows"], ok["retracted"], ok["affected"]) == (2, [], 0)
    listed = client.get("/api/retractions").json()["retractions"]
    assert [(r["id"], r["author"], r["rows"]) for r in listed] == [(ok["id"], "ann", 2)]

    # forward lookup, and the read-only console over the same database
    out = client.get("/api/lookup", params={"stream": "metrics", "key": "sid:s1",
                                            "start": T0.isoformat(), "end": "2026-03-01T00:01:00+00:00"}).json()
    assert out["counts"]["sources"] == 2 and out["alerts"] == [] and out["sources"][0]["alerts"] == []
    assert client.get("/api/lookup", params={"stream": "metrics", "key": "sid"}).status_code == 422
    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        rc = api_client(create_app(ro))
        res = rc.post("/api/retractions", json={"stream": "metrics", "predicate": "bw > 998", "reason": "x"})
        assert res.status_code == 409 and "no engine is running" in res.json()["detail"]
        assert [r["id"] for r in rc.get("/api/retractions").json()["retractions"]] == [ok["id"]]
        assert rc.get("/api/lookup", params={"stream": "metrics", "predicate": "bw > 998"}).json()["counts"][
            "sources"] == 1
        assert rc.get("/api/events/nope/support").json()["available"] is False
    finally:
        ro.close()


def test_the_cli_refuses_in_one_line(capsys):
    from moirae.cli.main import main

    for args, words in ((["retract", "--stream", "metrics", "--where", "bw > 1"], "needs --reason"),
                        (["lookup"], "name the rows"),
                        (["retract", "--stream", "m", "--key", "sid", "--reason", "x"], "column=value")):
        assert main(args) == 1
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
