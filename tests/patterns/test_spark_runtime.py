"""A compiled pattern live in Spark (moirae/patterns/spark_processor.py): a keyed stream
whose rows arrive out of order (within the lateness) gives the reference matcher's
matches, with each match's provenance its bound rows; a query stopped mid-stream and
restarted from its checkpoint loses and repeats none."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from ananke.ids import PROV
from ananke.query import ProvQuery
from moirae.patterns import reference_matches
from moirae.patterns.spark_operator import compile_live, pattern_stream, rocksdb_start
from moirae.patterns.spark_schema import ROW_ID

pytestmark = [pytest.mark.spark]

SQL = """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
  MEASURES COUNT(A.*) AS n, LAST(B.x) AS bx, FIRST(A.ts) AS since
  PATTERN (A{2,} B) WITHIN INTERVAL '40' SECOND
  DEFINE A AS x > 4, B AS x <= 4 AND x < LAST(A.x))"""
SCHEMA = "k string, x double, ts timestamp"
T0 = pd.Timestamp("2024-01-01", tz="UTC")
LATENESS_S = 150


def _rows(n: int = 64, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    secs = np.sort(rng.choice(n * 3, n, replace=False))
    return pd.DataFrame({"k": rng.choice(["a", "b", "c"], n), "x": rng.integers(0, 10, n).astype(float),
                         "ts": [T0 + pd.Timedelta(seconds=int(s)) for s in secs]})


def _files(rows: pd.DataFrame, size: int = 16) -> list[pd.DataFrame]:
    """Blocks of ``size`` rows, each pair swapped: a later block arrives first (out of
    order by up to two blocks' span, within the lateness: no row is dropped)."""
    blocks = [rows.iloc[i:i + size] for i in range(0, len(rows), size)]
    for i in range(0, len(blocks) - 1, 2):
        blocks[i], blocks[i + 1] = blocks[i + 1], blocks[i]
    seen = T0 - pd.Timedelta(days=1)
    for b in blocks:
        assert b["ts"].min() > seen - pd.Timedelta(seconds=LATENESS_S), "a row would be late"
        seen = max(seen, b["ts"].max())
    return blocks


def _write(folder, i: int, part: pd.DataFrame) -> None:
    tmp = folder / f".p{i:03d}.json"
    part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_json(tmp, orient="records", lines=True)
    tmp.rename(folder / f"p{i:03d}.json")


def _start(spark, inbox, checkpoint, batches: dict):
    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))
          .withWatermark("ts", f"{LATENESS_S} seconds"))
    pq = ProvQuery()
    cp = compile_live("p", SQL, df.schema, "ts")
    sink = pattern_stream(pq.source(df, "s", "ts", cols=["k", "x"]), cp, stream="s", payload=["k", "x"]).sink("p")
    assert pq.U == pd.Timedelta(seconds=40)  # U follows WITHIN (A 4)

    def collect(batch, batch_id: int) -> None:  # a replayed batch replaces its first delivery
        batches[batch_id] = batch.toPandas()

    with rocksdb_start(spark):
        q = (sink.df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    return q, cp


def _drain(q, watermark: pd.Timestamp | None = None) -> None:
    """Process every file written; with ``watermark``, until a batch has run under it
    (the no-data batch that fires the timers it passed)."""
    deadline = time.time() + 240
    while time.time() < deadline:
        q.processAllAvailable()
        wm = ((q.lastProgress or {}).get("eventTime") or {}).get("watermark")
        if watermark is None or (wm and pd.Timestamp(wm) >= watermark):
            return
        time.sleep(0.2)
    raise AssertionError(f"the watermark did not reach {watermark}")


def test_out_of_order_rows_match_as_the_reference_and_a_restart_repeats_none(spark, tmp_path):
    rows = _rows()
    files = _files(rows)
    end = pd.DataFrame({"k": ["zz"], "x": [0.0], "ts": [T0 + pd.Timedelta(hours=2)]})  # moves the watermark past all
    inbox, checkpoint = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    batches: dict[int, pd.DataFrame] = {}
    half = len(files) // 2
    for i, part in enumerate(files[:half]):
        _write(inbox, i, part)
    q, cp = _start(spark, inbox, checkpoint, batches)
    try:
        _drain(q)
    finally:
        q.stop()
    before = sum(len(b) for b in batches.values())
    for i, part in enumerate([*files[half:], end], start=half):
        _write(inbox, i, part)
    q, _ = _start(spark, inbox, checkpoint, batches)  # a new processor, from the checkpoint's state
    try:
        _drain(q, end["ts"].iloc[0] - pd.Timedelta(seconds=LATENESS_S))
        assert q.exception() is None
    finally:
        q.stop()
    got = pd.concat(list(batches.values()), ignore_index=True)
    # the reference: whole sequence per key, row ids in event-time order (ts are distinct)
    ref = reference_matches(cp, rows.assign(**{ROW_ID: np.arange(len(rows))}))
    first = set(pd.concat(files[:half]).index)  # the rows read before the restart
    spanning = [m for m in ref if {r for r, _ in m.rows} & first and {r for r, _ in m.rows} - first]
    assert spanning and before < len(ref), "some match should need state from before the restart"
    assert got["eid"].is_unique, "a match delivered twice"

    def prov_times(m) -> list:
        return sorted(rows["ts"].iloc[[rid for rid, _ in m.rows]])

    want = sorted((m.key[0], pd.Timestamp(m.last_ts), m.measures["n"], m.measures["bx"],
                   pd.Timestamp(m.measures["since"]), tuple(prov_times(m))) for m in ref)

    def utc(v) -> pd.Timestamp:
        t = pd.Timestamp(v)
        return t.tz_localize("UTC") if t.tzinfo is None else t

    have = sorted((r["k"], utc(r["ts"]), r["n"], r["bx"], utc(r["since"]), tuple(sorted(utc(p["ts"]) for p in r[PROV])))
                  for r in got.to_dict("records"))
    assert have == want


def test_a_static_frame_gives_the_reference_matches(spark):
    """A static DataFrame (batch re-materialization, M 4.2) runs the same code once per key
    through ``applyInPandas``: the reference matcher's matches, with their bound rows."""
    rows = _rows()
    df = spark.createDataFrame(rows, SCHEMA)
    pq = ProvQuery()
    cp = compile_live("p", SQL, df.schema, "ts")
    got = pattern_stream(pq.source(df, "s", "ts", cols=["k", "x"]), cp, stream="s", payload=["k", "x"]).df.toPandas()
    want = reference_matches(cp, rows.assign(**{ROW_ID: range(len(rows))}))
    assert len(want) > 0
    assert sorted(got["n"]) == sorted(m.measures["n"] for m in want)
    assert all(len(p) == n + 1 for p, n in zip(got[PROV], got["n"], strict=True))  # A{n} then B
