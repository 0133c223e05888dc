"""``moirae replay``: reproducible replay into the archive, clear one-line errors, and
nothing half-written when the input is bad."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


def cli(*args, config):
    return subprocess.run([sys.executable, "-m", "moirae.cli", *args, "--config", str(config)],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)


@pytest.fixture
def config(tmp_path, pg, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    f = tmp_path / "c.yaml"
    f.write_text(f"data_dir: {tmp_path / 'data'}\npostgres:\n  dsn: \"{pg.dsn}\"\n  schema: {pg.schema}\n")
    return f


@pytest.fixture
def csv(tmp_path):
    f = tmp_path / "in.csv"
    lines = ["ts,host,v"] + [f"2024-01-01T00:00:{i % 60:02d}Z,h{i % 3},{i}" for i in range(120)] + ["never,h0,1"]
    f.write_text("\n".join(lines) + "\n")
    return f


def count(pg, sql):
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()[0]


def test_replay_archives_every_row_once_and_dead_letters_the_bad_one(pg, config, csv):
    args = ("replay", str(csv), "--ts-col", "ts", "--out-of-order", "40", "--max-delay", "5000", "--seed", "7",
            "--stream", "rp", "--json")
    first = cli(*args, config=config)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["rows"] == 120 and out["dead_letters"] == 1
    again = cli(*args, config=config)  # the same replay again: every batch is already archived
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows"] == 0
    assert json.loads(again.stdout)["dead_letters"] == 0
    assert count(pg, "SELECT count(*) FROM rp") == 120
    assert count(pg, "SELECT count(DISTINCT v) FROM rp") == 120
    assert count(pg, "SELECT count(*) FROM moirae_dead_letters WHERE stream = 'rp'") == 1


@pytest.mark.parametrize("args, needle", [
    (("--ts-col", "nope"), "no event-time column 'nope'"),
    (("--ts-col", "host"), "no parseable event time"),
    (("--ts-col", "ts", "--out-of-order", "120"), "0-100"),
    (("--ts-col", "ts", "--min-delay", "10", "--max-delay", "5"), "greater than max_delay"),
])
def test_bad_input_is_one_line_and_writes_nothing(pg, config, csv, args, needle):
    res = cli("replay", str(csv), *args, "--stream", "bad", config=config)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("moirae: error:") and needle in last
    assert count(pg, "SELECT count(*) FROM pg_tables WHERE tablename = 'bad'") == 0


def test_missing_file(pg, config, tmp_path):
    res = cli("replay", str(tmp_path / "none.csv"), "--ts-col", "ts", config=config)
    assert res.returncode == 1 and "none.csv" in res.stderr.strip().splitlines()[-1]
