"""Chunk intervals per stream (archive.chunks): chosen from the rate of the
first batch or configured, fixed once recorded, and history-queries over streams of
different intervals read every row exactly once."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive import chunks as chunks_mod
from archive.chunks import MAX_CHUNKS_PER_BATCH
from archive.errors import SchemaConflict
from archive.names import quote
from archive.streams import Retention, RetentionPolicy
from moirae.config import load as load_config
from moirae.read.status_view import render_status
from tests.archive.arch_helpers import T0, make_archiver, metrics_spec, rows

pytestmark = pytest.mark.postgres


def test_the_interval_is_chosen_from_the_first_batch_rate_and_fixed(pg):
    arch = make_archiver(pg, chunk_target_rows=50_000)
    arch.register_stream(metrics_spec())
    arch.register_stream(metrics_spec("dense"))
    # one row a minute: 50,000 rows take ~35 days, rounded down to the 28-day step
    arch.append("metrics", 1, rows(1440, step=timedelta(minutes=1)))
    assert arch.grid_of("metrics").span == timedelta(days=28)
    # 100 rows a second: 50,000 rows take 500 s, rounded down to 5 minutes
    arch.append("dense", 1, rows(6000, step=timedelta(milliseconds=10)))
    assert arch.grid_of("dense").span == timedelta(minutes=5)
    # a later batch at another rate does not change it: partitions may not overlap
    arch.append("metrics", 2, rows(50, start=T0 + timedelta(days=40), step=timedelta(seconds=1)))
    assert arch.grid_of("metrics").span == timedelta(days=28)
    assert {c.end - c.start for c in arch.chunks("metrics")} == {timedelta(days=28)}
    arch.close()
    again = make_archiver(pg, chunk_target_rows=1)  # the catalog's record wins over settings
    assert again.grid_of("metrics").span == timedelta(days=28)
    assert again.grid_of("dense").span == timedelta(minutes=5)
    status = again.status()["streams"]
    assert status["metrics"]["chunk_interval_seconds"] == 28 * 86400
    assert status["metrics"]["rows"] == 1490
    again.close()


def test_a_configured_interval_wins_and_cannot_be_changed(pg):
    arch = make_archiver(pg, chunk_target_rows=10, chunk_intervals={"metrics": timedelta(hours=6)})
    arch.register_stream(metrics_spec())
    arch.append("metrics", 1, rows(100))
    assert arch.grid_of("metrics").span == timedelta(hours=6)
    arch.register_stream(metrics_spec("other"), chunk_interval=timedelta(days=1))
    with pytest.raises(SchemaConflict, match=r"stream 'other' is archived in chunks of 1 day"):
        arch.register_stream(metrics_spec("other"), chunk_interval=timedelta(hours=1))
    with pytest.raises(ValueError, match=r"'other': chunk interval must be a whole number of seconds"):
        arch.register_stream(metrics_spec("other"), chunk_interval=timedelta(milliseconds=1500))
    arch.close()


def test_a_join_over_mixed_intervals_runs_per_coarsest_interval_and_reads_each_row_once(pg):
    arch = make_archiver(pg)
    arch.register_stream(metrics_spec("fine"), chunk_interval=timedelta(hours=1))
    arch.register_stream(metrics_spec("coarse"), chunk_interval=timedelta(days=1))
    arch.append("fine", 1, rows(200, step=timedelta(minutes=29)))  # ~4 days, ~97 hourly chunks
    arch.append("coarse", 1, rows(60, step=timedelta(hours=2)))  # 5 days
    assert arch.grid_for(["fine"]).span == timedelta(hours=1)
    assert arch.grid_for(["fine", "coarse"]).span == timedelta(days=1)
    # a single-stream query's tasks are the stream's own chunks
    assert arch.chunk_ids(["fine"]) == [c.chunk_id for c in arch.chunks("fine")]
    day = arch.grid_for(["fine", "coarse"])
    tasks = arch.chunk_ids(["fine", "coarse"])
    assert tasks == sorted({day.chunk_of(c.start) for c in arch.chunks("fine") + arch.chunks("coarse")},
                           reverse=True)
    q = arch.prepare("SELECT f.n AS fn, c.n AS cn FROM fine f JOIN coarse c ON f.host = c.host")
    parts = pd.concat([arch.run_history_query(q, {}, t) for t in tasks])
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT f.n, c.n FROM fine f JOIN coarse c ON f.host = c.host "
                    "AND date_trunc('day', f.ts) = date_trunc('day', c.ts)")
        reference = sorted(cur.fetchall())  # a join per task: pairs inside one day, each once
    assert sorted(map(tuple, parts.to_numpy().tolist())) == reference
    arch.close()


def test_ensure_span_creates_the_covering_chunks_in_bounded_transactions(pg, monkeypatch):
    monkeypatch.setattr(chunks_mod, "CHUNKS_PER_TRANSACTION", 8)
    arch = make_archiver(pg, chunk_target_rows=1000)
    arch.register_stream(metrics_spec())
    end = T0 + timedelta(days=3)
    # no interval yet: the span and its row count give the rate (1,000 rows an hour -> 1h)
    tiers = arch.ensure_span("metrics", T0, end, bulk=True, rows=72_000)
    assert arch.grid_of("metrics").span == timedelta(hours=1)
    assert len(tiers) == 73 and set(tiers.values()) == {chunks_mod.Tier.OLD}
    with arch.db.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'metrics'::regclass GROUP BY c.xmin::text::bigint")
        per_tx = [n for (n,) in cur.fetchall()]
    assert sum(per_tx) == 73 and max(per_tx) <= 8
    assert arch.ensure_span("metrics", T0, end) == tiers  # idempotent
    res = arch.append("metrics", 1, rows(10, step=timedelta(hours=5)))
    assert res.rows == 10 and set(res.chunks) <= set(tiers)
    with pytest.raises(ValueError, match=r"ensure_span\('metrics'\): max_ts .* is before min_ts"):
        arch.ensure_span("metrics", end, T0)
    arch.close()


def test_the_status_table_aligns_long_stream_names():
    streams = {name: {"chunks": {"present": 1, "recent": 22, "old": 2318}, "rows": rows_, "late_rows": 0,
                      "dead_letters": 3, "chunk_interval_seconds": span}
               for name, rows_, span in [("m", 5, 3600), ("flights_from_new_york_airports_2013", 336_776, 7 * 86400)]}
    text = render_status({"chunk_span_seconds": 3600, "recent_chunks": 24, "present_cache_rows": 0,
                          "streams": streams, "totals": {"rows": 1, "late_rows": 0, "dead_letters": 3}})
    table = text.splitlines()[1:5]
    assert "7d" in table[2] and "1h" in table[3]  # sorted by name
    # every column ends at the same offset on every line
    assert len({len(line) for line in table}) == 1, "\n".join(table)
    for word in ("present", "recent", "old", "rows"):
        end = table[0].index(word) + len(word)
        assert all(line[end:end + 1] in ("", " ") and line[end - 1] != " " for line in (table[0], *table[2:]))


@pytest.mark.slow
def test_five_years_at_one_row_a_second_for_ten_keys_archive_without_error(pg):
    """5 years x 10 keys x 1 row/s is 1.6 billion rows, which this machine
    cannot write in a test. What runs, with the engine's default settings
    (``config/moirae.yaml``'s ``archive.chunk_target_rows``): the rate estimate from one
    real-rate hour (36,000 rows), then rows *sampled* across the whole 5-year span (one
    per key per chunk interval), so every chunk of the span is created through the append
    path, in batches of at most ``MAX_CHUNKS_PER_BATCH`` chunks, with PostgreSQL's default
    lock table. What does not: the row volume itself. On the embedded backend (the
    default) only: both use PostgreSQL's default lock table, and the test is slow."""
    if pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the five-year archive (slow)")
    keys, start = 10, pd.Timestamp("2021-01-01", tz="UTC")
    target = load_config().archive.chunk_target_rows
    assert target > 0, "the rate-based choice is the default"
    arch = make_archiver(pg, chunk_target_rows=target)
    arch.register_stream(metrics_spec())
    hour = pd.DataFrame({"ts": [start + pd.Timedelta(seconds=s) for s in range(3600) for _ in range(keys)],
                         "host": [f"k{k}" for _ in range(3600) for k in range(keys)], "v": 1.0, "n": 0})
    hour["n"] = range(len(hour))
    arch.append("metrics", 0, hour, bulk=True)
    span = arch.grid_of("metrics").span
    # 10 rows/s: the ladder's step at or below target / 10 s, and a chunk holds at most ~target rows
    assert span == chunks_mod.choose_interval(len(hour), timedelta(seconds=3599), target, timedelta(hours=1))
    assert span * 10 / timedelta(seconds=1) <= target * 1.001
    slots = pd.date_range(start, start + pd.Timedelta(days=5 * 365 + 1), freq=pd.Timedelta(span), inclusive="left")
    total, per_batch = len(hour), MAX_CHUNKS_PER_BATCH - 12
    for b, first in enumerate(range(0, len(slots), per_batch)):
        sel = slots[first:first + per_batch]
        frame = pd.DataFrame({"ts": [d + pd.Timedelta(seconds=60 + 37 * k)
                                     for d in sel for k in range(keys)],
                              "host": [f"k{k}" for _ in sel for k in range(keys)], "v": 2.0})
        frame["n"] = range(total, total + len(frame))
        total += arch.append("metrics", b + 1, frame, bulk=True).rows
    catalog = arch.chunks("metrics")
    assert len(catalog) == len(slots)
    assert sum(c.rows for c in catalog) == total
    assert max(c.end for c in catalog) - min(c.start for c in catalog) == len(slots) * span
    with arch.db.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM pg_inherits i JOIN pg_class c "
                    "ON c.oid = i.inhrelid WHERE i.inhparent = 'metrics'::regclass GROUP BY c.xmin::text::bigint) t")
        assert cur.fetchone()[0] <= chunks_mod.CHUNKS_PER_TRANSACTION
        # a statement over the whole stream takes a lock per chunk: with the default target
        # the 5 years fit PostgreSQL's default lock table (64 x 100); 6-hour chunks would not
        cur.execute("SELECT count(*) FROM metrics")
        assert cur.fetchone()[0] == total
    q = arch.prepare("SELECT count(*) AS n FROM metrics WHERE host = :h")
    newest = arch.chunk_ids(["metrics"])[0]
    assert arch.run_history_query(q, {"h": "k3"}, newest)["n"].tolist() == [1]
    arch.close()
    # the fixture's DROP SCHEMA would lock every partition in one transaction (more than
    # PostgreSQL's default lock table holds at this many): drop them in bounded ones first
    with arch.db.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'metrics'::regclass")
        parts = [r[0] for r in cur.fetchall()]
        for i in range(0, len(parts), 500):
            cur.execute("DROP TABLE " + ", ".join(quote(p) for p in parts[i:i + 500]))
            conn.commit()


def test_cached_task_ids_see_chunks_created_and_dropped_by_another_archiver(pg):
    arch = make_archiver(pg, recent=0)
    arch.register_stream(metrics_spec(retention=RetentionPolicy(Retention.DROP_AFTER_N_OLD_CHUNKS, 1)))
    arch.append("metrics", 1, rows(3, step=timedelta(hours=1)))
    first = arch.chunk_ids(["metrics"])
    assert len(first) == 3 and arch.chunk_ids(["metrics"]) is first  # unchanged catalog: the cached list
    other = make_archiver(pg, recent=0)  # another process, say an executor's writer
    other.append("metrics", 2, rows(2, start=T0 + timedelta(hours=5), step=timedelta(hours=1)))
    assert len(arch.chunk_ids(["metrics"])) == 5
    other.demote(T0 + timedelta(days=1))
    other.age()
    other.apply_retention()
    assert len(arch.chunk_ids(["metrics"])) == 1
    other.close()
    arch.close()
