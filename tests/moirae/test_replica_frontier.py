"""The replica task over a growing chunk writes only whole windows (M 4.2;
moirae.materialize.replica.Materializer.live_frontier).

One server's bandwidth arrives in two files. The first ends two minutes into the window
[04:10, 04:15), whose readings so far average above the threshold; the second brings the
window's other readings, which pull its average below it, and a later window that is an
overload. Between the two, the replica materializes the growing unit, as the engine's
low-priority task does at any time. In batch mode Spark emits the partial window as an
overload the live query never reports; below the live query's watermark every window is
whole, so the replica leaves the rest to the live query. In the end the event stream
holds exactly the overloads of the whole input, each once, and the context stream each
live event's context once, though the replica ran again after the live query wrote both.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from moirae.queries.hybrid import context_stream
from tests.moirae.test_hybrid import make_engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

PARTIAL_EID = "ov:s0:20240301041459"
# the readings of the last minute before the event (6 rows)
RECENT_SQL = ("SELECT e.eid, e.ts, m.ts AS at, m.bw FROM events e JOIN metrics m "
              "ON m.sid = e.sid AND m.ts <= e.ts AND m.ts > e.ts - interval '1 minute'")


def _readings(start: str, end: str, bw) -> pd.DataFrame:
    ts = pd.date_range(start, end, freq="10s", tz="UTC")
    return pd.DataFrame({"ts": ts, "sid": "s0", "bw": np.asarray(bw(ts), dtype=float)})


def _first() -> pd.DataFrame:
    """04:00-04:12: 50, except 200 in 04:10-04:11 and 0 after; the partial window
    [04:10, 04:12] averages 1400 / 13 = 108."""
    return _readings("2024-03-01 04:00", "2024-03-01 04:12", lambda ts: np.where(
        ts < pd.Timestamp("2024-03-01 04:10", tz="UTC"), 50.0,
        np.where(ts <= pd.Timestamp("2024-03-01 04:11", tz="UTC"), 200.0, 0.0)))


def _second() -> pd.DataFrame:
    """04:12:10-04:30: 0 to the end of that window (whole, it averages 1400 / 30 = 47),
    then 50, with an overload (200) in [04:20, 04:25)."""
    return _readings("2024-03-01 04:12:10", "2024-03-01 04:30", lambda ts: np.where(
        ts < pd.Timestamp("2024-03-01 04:15", tz="UTC"), 0.0,
        np.where((ts >= pd.Timestamp("2024-03-01 04:20", tz="UTC")) & (ts < pd.Timestamp("2024-03-01 04:25", tz="UTC")),
                 200.0, 50.0)))


def _write(folder, name: str, frame: pd.DataFrame) -> None:
    frame.assign(ts=frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(folder / name, index=False, header=False)


def _stored(pg) -> dict[str, int]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT eid, count(*) FROM ev_overload GROUP BY eid")
        return dict(cur.fetchall())


def _context_rows(pg) -> dict[str, tuple[int, int]]:
    """Per event: its context rows, and how many distinct readings they are."""
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT eid, count(*), count(DISTINCT at) FROM {context_stream('overload', 'recent')} GROUP BY eid")
        return {e: (n, d) for e, n, d in cur.fetchall()}


def test_a_replica_of_a_growing_chunk_leaves_partial_windows_to_the_live_query(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    first, second = _first(), _second()
    assert PARTIAL_EID in sc.expected_events(first)  # the partial window is an overload in batch mode
    want = sc.expected_events(pd.concat([first, second]))
    assert PARTIAL_EID not in want and want, "the whole window is not an overload; a later one is"
    engine = make_engine(tmp_path, pg, monkeypatch, spark, folder)
    try:
        engine.event_query("overload", sc.overload, inputs=["metrics"])
        engine.context_query("overload", RECENT_SQL, name="recent", window="1m")
        engine.start()
        _write(folder, "p0.csv", first)
        last = first["ts"].max().to_pydatetime()
        # the raw rows are archived, and the live query has a watermark: 30 s of lateness
        # behind 04:12 leaves the window [04:10, 04:15) open
        sc.wait(lambda: engine.watermark("metrics") is not None and engine.watermark("metrics") >= last - timedelta(seconds=30)
                and len(engine.archiver.read("metrics", first["ts"].min().to_pydatetime(), last)) == len(first),
                what="the first file archived")
        frontier = engine.materializer.live_frontier("overload")
        assert frontier is not None and frontier <= last
        unit = engine.materializer.unit_grid("overload").chunk_of(last)
        engine.materializer.materialize_chunk("overload", unit)  # the growing unit, mid-window
        assert PARTIAL_EID not in _stored(pg)
        _write(folder, "p1.csv", second)
        sc.wait(lambda: set(_stored(pg)) >= want and set(_context_rows(pg)) >= want,
                what="the live overload and its context")
        engine.materializer.materialize_chunk("overload", unit)  # again, once the live query wrote both
    finally:
        engine.close()
    stored = _stored(pg)
    assert set(stored) == want
    assert set(stored.values()) == {1}
    assert _context_rows(pg) == {e: (6, 6) for e in want}  # each reading once
