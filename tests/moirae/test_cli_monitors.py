"""``moirae deploy`` / ``undeploy`` / ``monitors``: the files a path names, the table
printed, and one line (exit 1) when no engine answers or no monitor file is there."""

from __future__ import annotations

import pytest

from moirae.cli.commands.monitors import monitor_files, render
from moirae.cli.errors import NoMonitorFile
from moirae.cli.main import main


def test_a_folder_names_its_yaml_files_sorted(tmp_path):
    for name in ("b.yaml", "a.yml", "notes.txt"):
        (tmp_path / name).write_text("name: x\n")
    assert [p.name for p in monitor_files(tmp_path)] == ["a.yml", "b.yaml"]
    assert monitor_files(tmp_path / "b.yaml") == [tmp_path / "b.yaml"]
    with pytest.raises(NoMonitorFile, match="no such monitor file"):
        monitor_files(tmp_path / "missing.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoMonitorFile, match="no monitor files"):
        monitor_files(tmp_path / "empty")


def test_the_table_shows_state_rates_tasks_and_span():
    rows = [{"name": "disk", "version": "0123456789abcdef", "state": "running", "rows_per_s": 12.345, "alerts": 3,
             "open_tasks": 2, "materialized": {"from": "2026-01-01T00:00:00+00:00",
                                               "until": "2026-01-02T00:00:00+00:00", "units": 4}},
            {"name": "old", "version": "fedcba9876543210", "state": "failed", "error": "bad file"}]
    text = render(rows).splitlines()
    assert text[0].split() == ["name", "version", "state", "rows/s", "alerts", "open", "tasks", "materialized"]
    assert text[1].split()[:6] == ["disk", "0123456789abcdef", "running", "12.3", "3", "2"]
    assert "2026-01-01T00:00:00+00:00 .. 2026-01-02T00:00:00+00:00" in text[1]
    assert "failed (bad file)" in text[2] and text[2].split()[-4:] == ["-", "-", "-", "-"]
    assert render([], live=False) == "no monitors deployed (no engine running)"


def test_deploy_without_an_engine_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MOIRAE_API_TOKEN", raising=False)
    f = tmp_path / "m.yaml"
    f.write_text("name: m\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data_dir: {tmp_path / 'data'}\napi:\n  port: 9\n")  # nothing listens on port 9
    assert main(["deploy", str(f), "--config", str(cfg)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no engine is running" in err[0], err
    assert main(["deploy", str(tmp_path / "none.yaml"), "--config", str(cfg)]) == 1
    assert "no such monitor file" in capsys.readouterr().err
