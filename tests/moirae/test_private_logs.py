"""Log files rotate and are private, and no password reaches the CLI's error line, its
log file or the terminal (moirae.runtime.errorlog, moirae.base.redact)."""

from __future__ import annotations

import io
import json
import logging
import stat

import psycopg2
import pytest

from moirae.cli.main import main
from moirae.runtime.errorlog import LOG_BACKUPS, file_logger, route_logging

SECRET = "Sup3r-s3cret"
DSN = f"host=127.0.0.1 port=1 user=moirae password='{SECRET} x' dbname=m connect_timeout=2"


def test_log_files_rotate_and_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv("MOIRAE_LOG_MAX_BYTES", "4000")
    log = file_logger("moirae.test.rotate", tmp_path / "logs" / "api.log")
    try:
        for i in range(400):
            log.info("record %d %s", i, "x" * 80)
        files = sorted(p.name for p in (tmp_path / "logs").iterdir())
        assert files[0] == "api.log" and len(files) == 1 + LOG_BACKUPS, files  # capped: the oldest dropped
        assert all((tmp_path / "logs" / f).stat().st_size <= 4200 for f in files)
        assert {stat.S_IMODE((tmp_path / "logs" / f).stat().st_mode) for f in files} == {0o600}
        assert stat.S_IMODE((tmp_path / "logs").stat().st_mode) == 0o700
        assert "record 399" in (tmp_path / "logs" / "api.log").read_text()
    finally:
        for h in list(log.handlers):
            log.removeHandler(h)
            h.close()


def test_records_and_tracebacks_are_redacted_in_the_file_and_on_the_terminal(tmp_path):
    term = io.StringIO()
    root = logging.getLogger()
    before = list(root.handlers)
    route_logging(tmp_path / "cli.log", stream=term)
    try:
        try:
            raise psycopg2.OperationalError(f"could not connect with {DSN}")
        except psycopg2.OperationalError as exc:
            logging.getLogger("moirae.test").error("lost postgresql://moirae:%s@db/m", SECRET, exc_info=exc)
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
                h.close()
    text = (tmp_path / "cli.log").read_text()
    assert "Traceback" in text and "password=***" in text and "moirae:***@db" in text
    assert SECRET not in text and SECRET not in term.getvalue() and term.getvalue().count("\n") == 1


@pytest.mark.postgres  # it tries to connect (to a port where nothing listens)
def test_the_cli_error_line_and_its_log_never_show_the_password(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"data_dir": str(tmp_path / "data"), "postgres": {"dsn": DSN}}))
    code = main(["archive", "status", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "password=***" in err, err
    assert SECRET not in err
    logs = tmp_path / "data" / "logs"
    assert all(SECRET not in p.read_text() for p in logs.glob("*.log*")) if logs.exists() else True
