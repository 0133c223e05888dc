"""``moirae cancel`` / ``moirae accelerate`` against a served engine (uvicorn on a free
loopback port), and with nothing listening. The commands run in-process through
``moirae.cli.main`` (the same code as the console script), except one real subprocess
that checks the exit status; one PostgreSQL backend suffices (the HTTP contract runs on
both in test_steer)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from moirae.api import serve
from moirae.cli import main
from tests.api.api_helpers import add_event, free_port, suspended, wait_for

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED = pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys, monkeypatch):
    def run(*args, env_extra=None):
        monkeypatch.delenv("MOIRAE_API_TOKEN", raising=False)
        for k, v in (env_extra or {}).items():
            monkeypatch.setenv(k, v)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse errors
            code = exc.code
        out = capsys.readouterr()
        return Result(code, out.out, out.err)
    return run


def _config(tmp_path, port, token=""):
    f = tmp_path / "api.yaml"
    # the engine's data_dir (engine_factory's tmp_path / "data"): the CLI finds its local API token there
    f.write_text(f"data_dir: {tmp_path / 'data'}\napi:\n  host: 127.0.0.1\n  port: {port}\n  token: '{token}'\n")
    return str(f)


@pytest.mark.postgres
@EMBEDDED
def test_cli_accelerates_and_cancels_through_the_api(engine, tmp_path, run_cli):
    for i, eid in enumerate(("ev:1", "ev:2")):
        add_event(engine, eid, 170 - i)
    wait_for(lambda: suspended(engine, "ev:1") and suspended(engine, "ev:2"), what="suspended")
    with serve(engine, host="127.0.0.1", port=0) as server:
        cfg = _config(tmp_path, server.port)
        res = run_cli("accelerate", "ev:1", "--tickets", "40", "--config", cfg)
        assert res.returncode == 0, res.stderr
        assert "accelerated 1 recall task(s) of event ev:1 by 40 tickets" in res.stdout
        assert "tickets 100 -> 140" in res.stdout
        wait_for(lambda: [t.tickets for t in engine.deploy.manager.tasks("ev:1")] == [140], what="140 tickets")

        res = run_cli("cancel", "ev:2", "--config", cfg)
        assert res.returncode == 0, res.stderr
        assert "cancelled 1 recall task(s) of event ev:2" in res.stdout
        assert engine.deploy.manager.tasks("ev:2") == [] and engine.deploy.manager.open_events() == ["ev:1"]

        res = run_cli("cancel", "ev:2", "--config", cfg, "--json")
        assert res.returncode == 0 and '"changed": false' in res.stdout

        res = run_cli("cancel", "nope", "--config", cfg)
        assert res.returncode == 1
        assert res.stderr.strip().splitlines() == ["moirae: error: POST /api/events/nope/cancel: HTTP 404: "
                                                   "no event 'nope' in the event log"]


@pytest.mark.postgres
@EMBEDDED
def test_cli_cancels_several_events_in_one_request(engine, tmp_path, run_cli):
    for i, eid in enumerate(("ev:1", "ev:2", "ev:3")):
        add_event(engine, eid, 170 - i)
    wait_for(lambda: all(suspended(engine, e) for e in ("ev:1", "ev:2", "ev:3")), what="suspended")
    with serve(engine, host="127.0.0.1", port=0) as server:
        cfg = _config(tmp_path, server.port)
        res = run_cli("cancel", "ev:1", "ev:3", "--config", cfg)
        assert res.returncode == 0, res.stderr
        assert "cancelled 2 recall task(s) of 2 event(s)" in res.stdout and "  ev:3: 1 task(s) cancelled" in res.stdout
        assert engine.deploy.manager.open_events() == ["ev:2"]
        res = run_cli("cancel", "ev:2", "nope", "--config", cfg)
        assert res.returncode == 1 and res.stderr.strip().splitlines() == [
            "moirae: error: POST /api/events/cancel: HTTP 404: no event 'nope' in the event log; nothing was cancelled"]
        assert engine.deploy.manager.open_events() == ["ev:2"]


@pytest.mark.postgres
@EMBEDDED
def test_cli_sends_the_token_from_config_or_environment(engine, tmp_path, run_cli):
    add_event(engine, "a", 170)
    wait_for(lambda: suspended(engine, "a"), what="suspended")
    with serve(engine, host="127.0.0.1", port=0, token="tok") as server:
        res = run_cli("accelerate", "a", "--config", _config(tmp_path, server.port))
        assert res.returncode == 1 and "HTTP 401" in res.stderr
        res = run_cli("accelerate", "a", "--config", _config(tmp_path, server.port), env_extra={"MOIRAE_API_TOKEN": "tok"})
        assert res.returncode == 0, res.stderr
        res = run_cli("cancel", "a", "--config", _config(tmp_path, server.port, token="tok"))
        assert res.returncode == 0 and "cancelled 1" in res.stdout


@pytest.mark.parametrize("args", [("cancel", "e1"), ("accelerate", "e1", "--tickets", "5")])
def test_no_engine_running_is_one_line_and_nonzero(tmp_path, args, run_cli):
    res = run_cli(*args, "--config", _config(tmp_path, free_port()))
    assert res.returncode == 1 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("moirae: error: no engine is running") and "connection refused" in line


def test_no_engine_running_as_a_real_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MOIRAE_API_TOKEN"}
    res = subprocess.run([sys.executable, "-m", "moirae.cli", "cancel", "e1", "--config",
                          _config(tmp_path, free_port())], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env=env)
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 1 and "no engine is running" in res.stderr


def test_bad_tickets_argument_is_rejected_before_calling(tmp_path, run_cli):
    res = run_cli("accelerate", "e1", "--tickets", "0", "--config", _config(tmp_path, free_port()))
    assert res.returncode == 2 and "tickets must be a positive integer" in res.stderr
