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
