"""Norms of other alerts, on a real engine (Spark and PostgreSQL): history rows of s0
that fed no alert are retracted; the norm (a Recall over s0's archived day) of every
live overload alert is revised by exactly those rows, through revision tuples, and the
undo revises it back (moirae/retract/norms.py)."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from recall.api import OutputKind
from recall.revision_ops import apply_revision
from tests.retract import overload_live

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

RECALL_SQL = ("SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n, max(h.bw) AS top "
              "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")


def _norm(engine, eid: str) -> dict:
    rows: dict = {}
    engine.results.flush()
    for o in engine.results.read(eid, "norm"):
        apply_revision(rows, o)
    return next(iter(rows.values()), {})  # one group: the alert's sid


def _expected(frame: pd.DataFrame, ts) -> dict:
    f = frame[(frame["sid"] == "s0") & (frame["ts"] >= ts - timedelta(days=1)) & (frame["ts"] < ts)]
    return {"n": len(f), "mean_bw": f["bw"].mean(), "top": f["bw"].max()}


def _check(row: dict, want: dict) -> None:
    assert row["n"] == want["n"]
    assert row["mean_bw"] == pytest.approx(want["mean_bw"], rel=1e-9)
    assert row["top"] == pytest.approx(want["top"], rel=1e-9)


def test_retracted_history_rows_revise_the_norms_of_alerts_they_never_fed(spark, pg, tmp_path, monkeypatch):
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the end-to-end norm test (slow)")
    history = sc.history(360)
    engine, folder = overload_live.start(spark, pg, tmp_path, monkeypatch, RECALL_SQL, history)
    try:
        parts, eids = overload_live.feed(engine, folder)
        # every norm complete: its task done (no later output races the revision)
        sc.wait(lambda: not set(eids) & set(engine.deploy.manager.open_events()) and all(_norm(engine, e)
                                                                                         for e in eids),
                what="every overload's norm, complete")
        archived = pd.concat([history, *parts]).reset_index(drop=True)
        ts_of = {e: engine.events.get(e).ts for e in eids}
        for e in eids:
            _check(_norm(engine, e), _expected(archived, ts_of[e]))

        start, end = pd.Timestamp("2024-03-01 00:10", tz="UTC"), pd.Timestamp("2024-03-01 00:20", tz="UTC")
        bad = (archived["sid"] == "s0") & (archived["ts"] >= start) & (archived["ts"] < end)
        assert bad.sum() > 0
        out = engine.retract({"stream": "metrics", "key": {"sid": "s0"}, "start": start.isoformat(),
                              "end": end.isoformat()}, "s0 was being recalibrated", "ann")
        assert out["retracted"] == []  # the rows fed no alert ...
        assert set(out["norms"]["events"]) == set(eids)  # ... but every overload's norm read them
        for e in eids:
            row = _norm(engine, e)
            _check(row, _expected(archived[~bad], ts_of[e]))
            assert _expected(archived, ts_of[e])["n"] - row["n"] == bad.sum()  # exactly the retracted rows
            assert engine.results.read(e, "norm")[-1].kind is OutputKind.UPDATE

        undo = engine.undo_retraction(out["id"], "bob")
        assert set(undo["norms"]["events"]) == set(eids)
        for e in eids:
            _check(_norm(engine, e), _expected(archived, ts_of[e]))
    finally:
        engine.close()
