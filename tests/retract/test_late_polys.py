"""Late rows archived into a window that already alerted (H 6, maintenance under insert):
the alert's stored polynomial gains their terms, so it evaluates like the window over
every archived row; a window without an alert, or rows absorbed twice, change nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from ananke.poly_eval import evaluate
from ananke.poly_store import PolyStore
from ananke.polynomial import AggSpec, Poly, PolyPlan
from archive import Archiver, ArchiveSettings, StreamSpec
from moirae.retract.late import LateFollower, absorb

T0 = datetime(2024, 3, 1, tzinfo=UTC)
FIVE = 300_000_000
PLAN = PolyPlan("overload", "window", 1, ("metrics",), ("bw",),
                (AggSpec("avg_bw", "avg", "bw", 0, "bw"), AggSpec("n", "count", "1", None, None)), ("host",), "ts",
                FIVE, FIVE, pre=("(bw >= CAST(0 AS DOUBLE))",), conditions=("(avg_bw > CAST(60 AS DOUBLE))",))


def _archived(arch, ids=None) -> list[tuple[int, dict]]:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid, ts, host, bw FROM metrics" + (" WHERE _sid = ANY(%s)" if ids else "")
                    + " ORDER BY ts, _sid", (list(ids),) if ids else ())
        return [(r[0], {"ts": r[1], "host": r[2], "bw": r[3]}) for r in cur.fetchall()]


def _alerted_window(pg):
    """An archive holding one host's first six readings (one 5-minute window) and a
    polynomial store with the overload plan: (archiver, store, the archived rows)."""
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    arch.register_stream(StreamSpec.build("metrics", "ts", {"host": "text", "bw": "double"}))
    arch.append("metrics", 0, pd.DataFrame({"ts": [T0 + timedelta(seconds=30 * i) for i in range(6)],
                                            "host": ["a"] * 6, "bw": [70.0, 80.0, 90.0, 75.0, 65.0, 85.0]}))
    store = PolyStore(pg.connect, prefix="late_poly", borrow=pg.connection).create()
    store.put_plan(PLAN)
    rows = _archived(arch)
    return arch, store, rows


def test_a_late_row_into_an_alerting_window_joins_its_polynomial(pg):
    arch, store, rows = _alerted_window(pg)
    alert_ts = T0 + timedelta(minutes=5) - timedelta(microseconds=1)
    poly = Poly(np.array([s for s, _ in rows], dtype=np.int64), np.array([[r["bw"]] for _, r in rows]))
    store.put("overload", [(42, alert_ts, poly)])
    payload = {"host": "a", "avg_bw": 77.5, "n": 6}
    assert not evaluate(PLAN, poly, payload).changed

    # after the alert: a late row into its window, one the pre-filter drops, one into a window with no alert
    arch.append("metrics", 1, pd.DataFrame({"ts": [T0 + timedelta(seconds=100), T0 + timedelta(seconds=110),
                                                   T0 + timedelta(minutes=7)],
                                            "host": ["a", "a", "a"], "bw": [5.0, -1.0, 99.0]}))
    late = [r for r in _archived(arch) if r[0] not in set(poly.ids.tolist())]
    assert len(late) == 3
    assert absorb(arch, store, {"overload": PLAN}, "metrics", late) == {"overload": 1}
    got = store.get("overload", [42])[42]
    (sid_late,) = [s for s, r in late if r["bw"] == 5.0]
    assert set(got.ids.tolist()) == set(poly.ids.tolist()) | {sid_late}
    out = evaluate(PLAN, got, payload)
    window = [r["bw"] for _, r in _archived(arch) if r["ts"] < T0 + timedelta(minutes=5) and r["bw"] >= 0]
    assert out.support == len(window) == 7 and out.values["n"] == 7
    assert out.values["avg_bw"] == pytest.approx(sum(window) / len(window)) and out.changed
    # a retraction of the late row gives the alert as it was
    back = evaluate(PLAN, got, payload, removed={sid_late})
    assert back.support == 6 and back.values == {"avg_bw": 77.5, "n": 6} and back.holds
    # absorbing the same rows again (a replayed batch) adds nothing
    assert absorb(arch, store, {"overload": PLAN}, "metrics", late) == {}
    assert store.get("overload", [42])[42] == got and store.count("overload") == 1
    arch.close()


def test_the_follower_finds_late_rows_as_they_are_archived(pg):
    arch, store, rows = _alerted_window(pg)
    poly = Poly(np.array([s for s, _ in rows], dtype=np.int64), np.array([[r["bw"]] for _, r in rows]))
    store.put("overload", [(42, T0 + timedelta(minutes=5) - timedelta(microseconds=1), poly)])
    wm = [T0 + timedelta(minutes=6)]  # the query's emitted watermark
    follower = LateFollower(arch, store, store.plans, lambda q: wm[0] if q == "overload" else None)
    assert follower.sweep() == {}  # the rows Spark aggregated are in the polynomial already
    arch.append("metrics", 1, pd.DataFrame({"ts": [T0 + timedelta(seconds=100), T0 + timedelta(minutes=8)],
                                            "host": ["a", "a"], "bw": [5.0, 99.0]}))
    assert follower.sweep() == {"overload": 1}  # the late row; the one at 8 min is not late
    (sid_late,) = [s for s, r in _archived(arch) if r["bw"] == 5.0]
    assert sid_late in set(store.get("overload", [42])[42].ids.tolist())
    assert follower.sweep() == {}
    wm[0] = T0 + timedelta(minutes=20)  # the row at 8 min is below it now, in a window with no alert
    assert follower.sweep() == {} and store.count("overload") == 1
    arch.close()


def test_a_late_row_placed_below_the_cursor_is_found_by_the_whole_pass(pg):
    """PostgreSQL puts a tuple where its free space map says there is room: here a block
    a vacuum freed, below the moving follower's cursor. The moving follower cannot see
    it; the ``whole`` follower, reading partitions from their first block, does."""
    from archive.names import partition_name, quote

    arch, store, rows = _alerted_window(pg)
    poly = Poly(np.array([s for s, _ in rows], dtype=np.int64), np.array([[r["bw"]] for _, r in rows]))
    store.put("overload", [(42, T0 + timedelta(minutes=5) - timedelta(microseconds=1), poly)])
    # another host's rows after the window, enough for the partition to span many blocks
    n = 3000
    arch.append("metrics", 1, pd.DataFrame({"ts": [T0 + timedelta(minutes=10, milliseconds=i) for i in range(n)],
                                            "host": ["b"] * n, "bw": [1.0] * n}))
    wm = [T0 + timedelta(minutes=6)]
    moving = LateFollower(arch, store, store.plans, lambda q: wm[0] if q == "overload" else None)
    whole = LateFollower(arch, store, store.plans, lambda q: wm[0] if q == "overload" else None, whole=True)
    for _ in range(4):  # each has swept enough for a cursor to move
        assert moving.sweep() == {} and whole.sweep() == {}
    (cid,) = [c.chunk_id for c in arch.chunks("metrics")]
    part = quote(partition_name("metrics", cid))
    assert moving._chunks[("metrics", cid)].start > 0  # the cursor has left the first block

    # free room in block 0 (another host's rows deleted, vacuumed), then a late row of
    # the alerted window written by a fresh session, which finds that room first
    with arch.db.connection() as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute(f"DELETE FROM {part} WHERE host = 'b' AND (ctid::text::point)[0] = 0")
        assert cur.rowcount > 0
        cur.execute(f"VACUUM (TRUNCATE false) {part}")  # the partition keeps its size
    fresh = arch.db.connect()
    try:
        with fresh, fresh.cursor() as cur:  # one transaction, as the archive writes a row and counts it
            cur.execute(f"INSERT INTO {part} (_sid, _batch, ts, host, bw) VALUES (%s, 2, %s, 'a', 5.0) "
                        f"RETURNING (ctid::text::point)[0]", (10**15, T0 + timedelta(seconds=100)))
            (block,) = cur.fetchone()
            cur.execute("UPDATE moirae_chunks SET rows = rows + 1 WHERE stream = 'metrics' AND chunk_id = %s", (cid,))
    finally:
        fresh.close()
    assert block < moving._chunks[("metrics", cid)].start  # below the moving cursor

    found_by_moving = sum(moving.sweep().get("overload", 0) for _ in range(3))
    assert found_by_moving == 0  # what the whole pass is for
    assert whole.sweep() == {"overload": 1}
    assert 10**15 in set(store.get("overload", [42])[42].ids.tolist())
    assert whole.sweep() == {}  # absorbed once
    arch.close()
