"""The maritime scenario end to end (moirae/scenarios/maritime.py): its monitor files
(config/monitors/maritime) deployed on a real engine over the ``maritime`` source kind,
replayed as fast as the queries take it; the pattern event-queries' alerts are exactly
the planted behaviours (T Defs. 5.15, 5.16), each with the vessel's context and its
Recall and Similarity Recall tasks."""

from __future__ import annotations

import time

import pandas as pd
import psycopg2
import pytest

from moirae.scenarios.maritime import deploy, monitor_texts
from moirae.sources.maritime_source import generator_config

OPTIONS = {"vessels": 6, "hours": 3.0, "seed": 3, "speedup": "max", "maxRowsPerBatch": 100000}
BEHAVIOURS = ("approach", "loitering")


def _rows(pg, sql: str) -> list[tuple]:
    conn = psycopg2.connect(pg.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f'"{pg.schema}".{sql.split(" FROM ")[1].split()[0]}',))
            if cur.fetchone()[0] is None:
                return []
            cur.execute(sql.replace(" FROM ", f' FROM "{pg.schema}".', 1))
            return cur.fetchall()
    finally:
        conn.close()


def _utc(t) -> pd.Timestamp:
    t = pd.Timestamp(t)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def test_monitor_texts_take_source_options():
    texts = monitor_texts(BEHAVIOURS, {"vessels": 3})
    assert [f.stem for f, _ in texts] == list(BEHAVIOURS)
    assert all("vessels: 3" in t for _, t in texts)


@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # the archive path is tested on both elsewhere
def test_scenario_alerts_are_the_planted_behaviours(engine_factory, pg):
    from moirae.sources.maritime import MaritimeScenario

    truth = MaritimeScenario(generator_config(OPTIONS)).truth()
    truth = truth[truth["behaviour"].isin(BEHAVIOURS)]
    want = {(r.behaviour, r.vessel_id, r.start, r.end) for r in truth.itertuples()}
    assert {b for b, *_ in want} == set(BEHAVIOURS)
    engine = engine_factory(spark={"trigger": "500ms"}, archive={"chunk_span": "1h", "chunk_target_rows": 0})
    try:
        info = deploy(engine, behaviours=BEHAVIOURS, source_options=OPTIONS)
        assert info["monitors"] == list(BEHAVIOURS)
        engine.start()
        got: set = set()
        deadline = time.monotonic() + 240  # a loaded machine; done as soon as every behaviour is in
        while time.monotonic() < deadline and got != want:
            engine.run_for(1.0)
            got = {(b, v, _utc(s), _utc(e))
                   for b in BEHAVIOURS for v, s, e in _rows(pg, f"SELECT vessel_id, start_ts, end_ts FROM ev_{b}")}
        archived = _rows(pg, "SELECT count(*) FROM vessels")
        assert got == want, f"archived rows {archived}, events {len(got)} of {len(want)}"
        eids = {e for b in BEHAVIOURS for (e,) in _rows(pg, f"SELECT eid FROM ev_{b}")}
        with_context = {e for b in BEHAVIOURS
                        for (e,) in _rows(pg, f"SELECT DISTINCT eid FROM cx_{b}_vessel")}
        assert eids and eids <= with_context
        ops = {t.operator for t in engine.tasks()}
        assert {f"{b}_{op}" for b in BEHAVIOURS for op in ("track", "similar")} <= ops, ops
        engine.stop()
    finally:
        engine.close()
