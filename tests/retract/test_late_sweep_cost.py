"""The late-row follower's cost follows the late rows and the alerts, not the ingest: of
thousands of on-time rows archived between sweeps, only the late ones (and a handful
of candidates) reach Python, and each late row still joins its alert's polynomial,
whether its window closed long before it came (surely late) or just before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

import moirae.retract.late as late_mod
from ananke.ids import from_micros, micros
from ananke.poly_maint import window_bounds
from ananke.poly_store import PolyStore
from ananke.polynomial import AggSpec, Poly, PolyPlan
from archive import Archiver, ArchiveSettings, StreamSpec
from moirae.retract.late import LateFollower, closed_below

T0 = datetime(2024, 3, 1, tzinfo=UTC)
FIVE = 300_000_000
HOSTS = [f"h{i:02d}" for i in range(20)]


def _plan(slide: int = FIVE) -> PolyPlan:
    return PolyPlan("overload", "window", 1, ("metrics",), ("bw",),
                    (AggSpec("avg_bw", "avg", "bw", 0, "bw"),), ("host",), "ts", FIVE, slide,
                    conditions=("(avg_bw > CAST(60 AS DOUBLE))",))


def _ids(arch, host: str, lo: datetime, hi: datetime) -> list[int]:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid FROM metrics WHERE host = %s AND ts >= %s AND ts < %s ORDER BY ts", (host, lo, hi))
        return [r[0] for r in cur.fetchall()]


def _setup(pg, monkeypatch, plan):
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    arch.register_stream(StreamSpec.build("metrics", "ts", {"host": "text", "bw": "double"}))
    store = PolyStore(pg.connect, prefix="late_cost", borrow=pg.connection).create()
    store.put_plan(plan)
    handed: list[int] = []
    real = late_mod.absorb

    def counting(archiver, polys, plans, stream, rows):  # the real absorb, counting what it is handed
        handed.append(len(rows))
        return real(archiver, polys, plans, stream, rows)

    monkeypatch.setattr(late_mod, "absorb", counting)
    wm: list[datetime | None] = [None]
    follower = LateFollower(arch, store, store.plans, lambda q: wm[0] if q == "overload" else None)
    return arch, store, follower, wm, handed


def _window(j: int) -> tuple[datetime, datetime]:
    return T0 + timedelta(microseconds=FIVE * j), T0 + timedelta(microseconds=FIVE * (j + 1))


def _on_time(j: int, per_host: int = 50) -> pd.DataFrame:
    lo, _ = _window(j)
    step = FIVE // per_host
    return pd.DataFrame({"ts": [lo + timedelta(microseconds=step * i + k) for i in range(per_host) for k in range(len(HOSTS))],
                         "host": [h for _ in range(per_host) for h in HOSTS],
                         "bw": [70.0 + (i % 7) for i in range(per_host) for _ in HOSTS]})


def test_only_late_rows_reach_python_and_each_joins_its_alert(pg, monkeypatch):
    plan = _plan()
    arch, store, follower, wm, handed = _setup(pg, monkeypatch, plan)
    assert follower.sweep() == {}
    alerts: dict[int, int] = {}  # window -> sink id of h03's alert
    batch = 0
    for j in range(6):  # the live path: a window's rows, a sweep, the window closes (h03 alerts), a sweep
        arch.append("metrics", batch, _on_time(j))
        batch += 1
        follower.sweep()
        lo, hi = _window(j)
        poly = Poly(np.array(_ids(arch, "h03", lo, hi), dtype=np.int64),
                    np.full((len(_ids(arch, "h03", lo, hi)), 1), 73.0))
        alerts[j] = 1000 + j
        store.put("overload", [(1000 + j, hi - timedelta(microseconds=1), poly)])
        wm[0] = hi
        assert follower.sweep() == {}
    ingested = 6 * 50 * len(HOSTS)
    # a row into a window that closed long ago, one into the window that closed last (before any
    # sweep saw it closed: the band), one of a host that never alerted, one into an open window
    arch.append("metrics", batch, pd.DataFrame({
        "ts": [_window(1)[0] + timedelta(seconds=7), _window(5)[0] + timedelta(seconds=9),
               _window(2)[0] + timedelta(seconds=3), _window(6)[0] + timedelta(seconds=1)],
        "host": ["h03", "h03", "h11", "h03"], "bw": [1.0, 2.0, 3.0, 4.0]}))
    batch += 1
    got = follower.sweep()
    got2 = follower.sweep()
    assert got == {"overload": 2} and got2 == {}
    for j, bw in ((1, 1.0), (5, 2.0)):
        lo, hi = _window(j)
        with arch.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT _sid FROM metrics WHERE host = 'h03' AND bw = %s", (bw,))
            (sid,), = cur.fetchall()
        assert sid in set(store.get("overload", [alerts[j]])[alerts[j]].ids.tolist())
    # of 6,000 on-time rows and 4 late ones, a few reached Python, not the ingest
    assert sum(handed) <= 8, (handed, ingested)
    assert follower.rows_read == sum(handed)
    arch.close()


def test_a_late_row_archived_before_its_window_is_seen_closed_is_absorbed(pg, monkeypatch):
    """The row comes while the window is still open for the follower (the watermark it
    reads is below the window's end); Spark drops it, the window closes and alerts. The
    next sweep reads it again with the alert in its band."""
    plan = _plan()
    arch, store, follower, wm, handed = _setup(pg, monkeypatch, plan)
    follower.sweep()
    arch.append("metrics", 0, _on_time(0))
    wm[0] = _window(0)[0] + timedelta(seconds=250)
    follower.sweep()
    arch.append("metrics", 1, pd.DataFrame({"ts": [_window(0)[0] + timedelta(seconds=5)], "host": ["h07"],
                                            "bw": [9.0]}))
    follower.sweep()  # read while its window is open
    lo, hi = _window(0)
    ids = [s for s in _ids(arch, "h07", lo, hi)]
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid FROM metrics WHERE bw = 9.0")
        (late,), = cur.fetchall()
    store.put("overload", [(7, hi - timedelta(microseconds=1), Poly(np.array([s for s in ids if s != late],
                                                                             dtype=np.int64),
                                                                    np.full((len(ids) - 1, 1), 70.0)))])
    wm[0] = hi
    assert follower.sweep() == {"overload": 1}
    assert late in set(store.get("overload", [7])[7].ids.tolist())
    assert sum(handed) <= 2
    arch.close()


def test_closed_below_gives_the_rows_whose_earliest_window_ended():
    for slide in (FIVE, 60_000_000):
        plan = _plan(slide=slide)
        for wm in (T0 + timedelta(minutes=7), T0 + timedelta(minutes=7, seconds=30)):
            bound = closed_below(plan, wm)
            for s in range(0, 600, 7):
                ts = T0 + timedelta(seconds=s)
                first_end = from_micros(min(hi for _, hi in window_bounds(micros(ts), plan.size_us, plan.slide_us)))
                assert (ts < bound) == (first_end <= wm), (slide, wm, ts)
    assert closed_below(_plan(), T0 + timedelta(minutes=7)) == T0 + timedelta(minutes=5)
    assert closed_below(_plan(60_000_000), T0 + timedelta(minutes=7, seconds=30)) == T0 + timedelta(minutes=7)


def test_the_band_reads_only_the_alerting_keys_rows(pg, monkeypatch):
    """Every host of a window alerted but one: the rows of that window that reach Python
    are the late rows of alerting hosts, not the silent host's on-time ones, and every
    alert's key is found (looked up in one read for the band)."""
    plan = _plan()
    arch, store, follower, wm, handed = _setup(pg, monkeypatch, plan)
    follower.sweep()
    arch.append("metrics", 0, _on_time(0))
    follower.sweep()
    lo, hi = _window(0)
    alerting = [h for h in HOSTS if h != "h19"]
    store.put("overload", [(100 + n, hi - timedelta(microseconds=1),
                            Poly(np.array(_ids(arch, h, lo, hi), dtype=np.int64), np.full((50, 1), 73.0)))
                           for n, h in enumerate(alerting)])
    # before the follower sees the window closed: h19's rows (no alert) and h04's late row
    arch.append("metrics", 1, pd.DataFrame({"ts": [lo + timedelta(seconds=s) for s in (3, 4, 5)],
                                            "host": ["h19", "h19", "h04"], "bw": [5.0, 6.0, 7.0]}))
    wm[0] = hi
    handed.clear()
    assert follower.sweep() == {"overload": 1}
    assert sum(handed) == 1  # h04's late row; not h19's (no alert), nor the alerts' own rows
    assert len({k for (q, _), k in follower._keys.items() if q == "overload" and k is not None}) == len(alerting)
    arch.close()
