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


# -- --analyze: the file, or a dry run of the delivery order; no flag silently ignored --

def test_analyze_without_disorder_flags_measures_the_file(csv, config):
    res = cli("replay", str(csv), "--ts-col", "ts", "--analyze", "--json", config=config)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["analyzed"], out["dry_run"], out["rows"]) == ("file", False, 120)
    assert out["out_of_order"] == 59  # the second minute repeats the first: all but its last row are behind
    text = cli("replay", str(csv), "--ts-col", "ts", "--analyze", config=config).stdout
    assert text.startswith("analyzed the file in its own order")


def test_analyze_with_disorder_flags_is_a_dry_run_of_the_delivery_order(pg, csv, config, tmp_path):
    ordered = tmp_path / "ordered.csv"
    ordered.write_text("ts,v\n" + "".join(f"{i},{i}\n" for i in range(2000)))
    base = ("replay", str(ordered), "--ts-col", "ts", "--ts-unit", "ms", "--analyze", "--json")
    plain = json.loads(cli(*base, config=config).stdout)
    assert plain["out_of_order"] == 0 and plain["analyzed"] == "file"
    dry = cli(*base, "--out-of-order", "20", "--max-delay", "50", "--seed", "3", config=config)
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert (out["analyzed"], out["dry_run"]) == ("delivery order", True)
    assert out["replay_options"]["seed"] == 3 and out["replay_options"]["out_of_order"] == 20
    assert 5 < out["out_of_order_pct"] < 25 and out["max_delay_ms"] <= 50
    again = json.loads(cli(*base, "--out-of-order", "20", "--max-delay", "50", "--seed", "3", config=config).stdout)
    assert again == out  # reproducible
    text = cli(*base[:-1], "--out-of-order", "20", config=config).stdout
    assert text.startswith("analyzed dry run: the delivery order a replay with --out-of-order 20.0")
    assert "nothing written" in text
    assert count(pg, "SELECT count(*) FROM pg_tables WHERE tablename = 'replay'") == 0


@pytest.mark.parametrize("args, needle", [
    (("--max-delay", "500"), "--max-delay would be ignored"),
    (("--seed", "4"), "--seed would be ignored"),
    (("--out-of-order", "0", "--distribution", "normal"), "--distribution would be ignored"),
    (("--analyze", "--speedup", "10"), "--speedup would be ignored: --analyze writes nothing"),
    (("--analyze", "--stream", "x"), "--stream would be ignored"),
])
def test_a_flag_that_would_be_ignored_is_an_error(pg, config, csv, args, needle):
    res = cli("replay", str(csv), "--ts-col", "ts", *args, config=config)
    assert res.returncode == 1, res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("moirae: error:") and needle in line, line
    assert count(pg, "SELECT count(*) FROM pg_tables WHERE tablename IN ('replay', 'x')") == 0


# -- resume after a kill -----------------------------------------------------------------

def test_a_killed_replay_resumes_where_it_stopped_with_nothing_twice(pg, config, tmp_path):
    """SIGKILL a paced replay after some batches committed; the same command then
    archives the rest: every row once, the dead letter once, no batch missing."""
    import signal
    import time

    f = tmp_path / "big.csv"
    f.write_text("ts,v\n" + "".join(f"{i * 250},{i}\n" for i in range(1200)) + "bad,-1\n")  # 300 s, 4 rows/s
    args = ["replay", str(f), "--ts-col", "ts", "--ts-unit", "ms", "--out-of-order", "30", "--max-delay", "3000",
            "--seed", "5", "--stream", "rk", "--json", "--config", str(config)]
    proc = subprocess.Popen([sys.executable, "-m", "moirae.cli", *args, "--speedup", "40"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if count(pg, "SELECT to_regclass('moirae_batches') IS NOT NULL") and \
                    count(pg, "SELECT count(*) FROM moirae_batches WHERE stream = 'rk'") >= 20:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    first = count(pg, "SELECT count(*) FROM moirae_batches WHERE stream = 'rk'")
    assert 20 <= first < 300, first  # killed mid-way
    rows_before = count(pg, "SELECT count(*) FROM rk")
    assert 0 < rows_before < 1200
    res = subprocess.run([sys.executable, "-m", "moirae.cli", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["resumed"] is True and out["batches_already_archived"] >= first
    assert out["rows"] == 1200 - rows_before and out["dead_letters"] == 0  # recorded by the first run
    assert count(pg, "SELECT count(*) FROM rk") == 1200
    assert count(pg, "SELECT count(DISTINCT v) FROM rk") == 1200
    assert count(pg, "SELECT count(*) FROM moirae_batches WHERE stream = 'rk'") == out["batches"]
    assert count(pg, "SELECT max(batch_id) + 1 FROM moirae_batches WHERE stream = 'rk'") == out["batches"]
    assert count(pg, "SELECT count(*) FROM moirae_dead_letters WHERE stream = 'rk'") == 1
    other_args = [("6" if a == "5" else a) for a in args]  # another seed: other rows in each batch
    other = subprocess.run([sys.executable, "-m", "moirae.cli", *other_args], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert other.returncode == 1 and "holds a replay of" in other.stderr
    assert count(pg, "SELECT count(*) FROM rk") == 1200


def test_replayed_history_is_tiered_by_the_streams_own_watermark(pg, config, tmp_path):
    """No query reads a replayed stream, so its own watermark decides the tiers: a replayed
    three days end up recent and old, with at most the newest chunk present (hourly
    chunks: the rate-based choice, 2 rows an hour, would make it one chunk)."""
    config.write_text(config.read_text() + "archive:\n  chunk_target_rows: 0\n")
    f = tmp_path / "days.csv"
    f.write_text("ts,host,v\n" + "\n".join(f"2024-01-0{1 + i // 48}T{(i % 48) // 2:02d}:{30 * (i % 2):02d}:00Z,h1,{i}"
                                           for i in range(144)) + "\n")
    done = cli("replay", str(f), "--ts-col", "ts", "--stream", "days", "--json", config=config)
    assert done.returncode == 0, done.stderr
    tiers = dict(count_rows(pg, "SELECT tier, count(*) FROM moirae_chunks WHERE stream = 'days' GROUP BY tier"))
    assert sum(tiers.values()) == 72
    assert tiers.get("present", 0) <= 1
    assert tiers.get("old", 0) >= 72 - 1 - 24


def count_rows(pg, sql):
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_a_replayed_year_gets_its_chunk_interval_from_the_files_rate(pg, tmp_path, monkeypatch):
    """A replayed year was 8,760 hourly chunks; with archive.chunk_target_rows
    the whole file's rate picks the interval (20 rows a day, 1,000 rows: 50 days, rounded
    down to 28 days), so the year is 13 or 14 chunks, none left present."""
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    config = tmp_path / "c.yaml"
    config.write_text(f"data_dir: {tmp_path / 'data'}\npostgres:\n  dsn: \"{pg.dsn}\"\n  schema: {pg.schema}\n"
                      "archive:\n  chunk_target_rows: 1000\n")
    f = tmp_path / "year.csv"
    start = 1_704_067_200  # 2024-01-01
    from datetime import UTC, datetime
    f.write_text("ts,host,v\n" + "\n".join(
        f"{datetime.fromtimestamp(start + 86400 * d, UTC).isoformat()},h{h},{d}" for d in range(365)
        for h in range(20)) + "\n")
    done = cli("replay", str(f), "--ts-col", "ts", "--stream", "year", "--speedup", "max", "--json", config=config)
    assert done.returncode == 0, done.stderr
    assert count(pg, "SELECT chunk_us FROM moirae_streams WHERE stream = 'year'") == 28 * 86400 * 10**6
    tiers = dict(count_rows(pg, "SELECT tier, count(*) FROM moirae_chunks WHERE stream = 'year' GROUP BY tier"))
    assert sum(tiers.values()) in (13, 14) and tiers.get("present", 0) <= 1, tiers
    assert count(pg, "SELECT sum(rows) FROM moirae_chunks WHERE stream = 'year'") == 7300
    status = cli("archive", "status", config=config)
    assert status.returncode == 0 and "28d" in status.stdout, status.stdout
