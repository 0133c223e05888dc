"""The CLI: --help everywhere, one-line errors, documented in the README."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from moirae.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    """Every (sub)command path of the parser, e.g. ('run',), ('archive', 'status')."""
    out = []

    def walk(parser, path):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            out.append(path)
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))

    walk(build_parser(), ())
    return out


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "moirae.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env)


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_every_command_has_help_and_is_in_the_readme(path):
    res = run_cli(*path, "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: moirae " + " ".join(path) in res.stdout
    readme = (ROOT / "README.md").read_text()
    assert f"moirae {' '.join(path)}" in readme, f"`moirae {' '.join(path)}` is not documented in README.md"


@pytest.mark.parametrize("args, needle", [
    (("frobnicate",), "invalid choice"),
    (("run", "--duration", "soon"), "not a duration"),
    (("run", "--duration", "0"), "must be positive"),
    (("run", "--scenario", "moon"), "invalid choice"),
    (("archive",), "required"),
])
def test_bad_arguments_exit_nonzero_with_one_line(args, needle):
    res = run_cli(*args)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("usage")
             and not ln.startswith(" ")]
    assert len(lines) == 1, res.stderr
    assert needle in lines[0]


def test_bad_config_is_one_line_naming_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("archive:\n  chunk_spam: 1h\n")
    res = run_cli("archive", "status", "--config", str(f))
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("moirae: error: unknown configuration key 'archive.chunk_spam'")


def _foreign_database_config(tmp_path, pg) -> Path:
    """A real failure no command anticipates: the configured schema holds a table of
    the archive's name that is something else (a foreign or damaged database)."""
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {pg.schema}")
        cur.execute(f"CREATE TABLE {pg.schema}.moirae_chunks (something_else int)")
    f = tmp_path / "c.yaml"
    f.write_text(f"data_dir: {tmp_path / 'data'}\npostgres:\n  dsn: \"{pg.dsn}\"\n  schema: {pg.schema}\n")
    return f


@pytest.mark.postgres
@pytest.mark.parametrize("args", [("archive", "status"), ("replay", "TINY", "--ts-col", "ts")], ids=" ".join)
def test_an_unexpected_failure_is_one_line_naming_the_log_not_a_traceback(tmp_path, pg, args):
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("MOIRAE_PG_DSN", "MOIRAE_LOG_DIR")}
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("ts,v\n2024-01-01T00:00:00Z,1\n")
    args = [str(tiny) if a == "TINY" else a for a in args]
    res = run_cli(*args, "--config", str(_foreign_database_config(tmp_path, pg)), env=env)
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("moirae: error: ") and "error id " in line, line
    log = Path(line.rsplit("details in ", 1)[1].rstrip(")"))
    assert log == tmp_path / "data" / "logs" / "cli.log"
    error_id = line.split("error id ", 1)[1].split(";", 1)[0]
    text = log.read_text()
    assert f"error id {error_id}" in text and "Traceback" in text
