"""Pattern matches a retraction reveals, a correction revises or ends, and their undo
(moirae/retract/patterns.py; T 3-4 x H 4-5).

Real Spark and PostgreSQL: a live pattern event-query (strict contiguity) over a file
source. Key v1 holds two candidate matches of ``A B{2,} C``:

- rows 0-4 (t = 0..20 s): a bad reading (x = 3) at t = 10 s breaks the B run, so the
  live query finds no match there. Retracting it reveals the match A B B C: it becomes
  an event through the live event path (archived, in the event log with its MEASURES,
  its four bound rows in the Ananke graph and as its polynomial), with the id the live
  operator forms for it (the same as a batch run over the flagged rows). The undo
  withdraws it again;
- rows 5-8 (t = 40..55 s): the live match. Correcting its second B (14 -> 50) revises
  its MEASURES (peak 14 -> 50, event log, archived row, revision record); the undo
  revises them back. Correcting its first B to 3 breaks the match: no bound row is
  removed (its polynomial still stands), yet it is withdrawn; the undo restores it.

The same pattern deployed in a one-operator set (``Engine.pattern_queries``) is
reconciled alike, its raised match tagged with the pattern's name.
"""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

from archive import Database
from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.spark_processor import event_id
from tests.moirae.scenario_small import wait

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

NAME, SOURCE = "burst", "pings"
SET, WIDE = "bursts", "wide"  # a pattern set (Engine.pattern_queries) holding pattern WIDE
SQL = f"""SELECT * FROM {SOURCE} MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES COUNT(B.*) AS n, MAX(B.x) AS peak
  PATTERN (A B{{2,}} C) WITHIN INTERVAL '60' SECOND
  DEFINE A AS x < 0, B AS x > 10, C AS x < 0)"""
T0 = pd.Timestamp("2025-01-01", tz="UTC")


def _rows() -> pd.DataFrame:
    v1 = [(0, -1.0), (5, 20.0), (10, 3.0), (15, 30.0), (20, -1.0),  # broken by the 3 at t = 10 s
          (40, -1.0), (45, 12.0), (50, 14.0), (55, -1.0)]  # the live match
    rows = [(T0 + pd.Timedelta(seconds=s), "v1", x) for s, x in v1]
    rows += [(T0 + pd.Timedelta(seconds=s), "clock", 0.0) for s in range(0, 3600, 30)]  # moves the watermark
    return pd.DataFrame(rows, columns=["ts", "k", "x"]).sort_values(["ts", "k"]).reset_index(drop=True)


@pytest.fixture
def engine(pg_dsn, tmp_path, spark):
    from tests.conftest import _backend_dsn
    from tests.engine_factory import make_engine

    if pg_dsn != _backend_dsn("embedded"):
        pytest.skip("one backend is enough for a live pattern engine (slow)")
    db = Database(pg_dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    inbox = tmp_path / "in"
    inbox.mkdir()
    rows = _rows()
    rows.assign(ts=rows["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(inbox / "p0.csv", index=False, header=False)
    eng = make_engine(db, tmp_path / "data", spark={"trigger": "200ms"},
                      archive={"chunk_span": "10m", "chunk_target_rows": 0})
    eng.source(SOURCE, spark.readStream.schema("ts timestamp, k string, x double").csv(str(inbox)), ts="ts",
               lateness="10 seconds")
    eng.pattern_query(NAME, SQL)
    eng.pattern_queries(SET, {WIDE: SQL})  # the same pattern in a one-operator set (its events tagged)
    eng.start()
    try:
        flow = eng.deploy.flows[NAME]
        wait(lambda: len(eng.deploy.events.list(event=NAME)) == len(eng.deploy.events.list(event=SET)) == 1,
             what="the live match as an event of both queries")
        wait(lambda: (flow.emitted_below() or T0) > T0 + pd.Timedelta(minutes=10), what="the live frontier")
        yield eng
    finally:
        eng.close()
        db.drop_schema()
        db.close()


def _sids(engine) -> dict[int, int]:
    """Source id of each v1 row, by its second."""
    got = engine.archiver.read(SOURCE, T0, T0 + pd.Timedelta(minutes=2), with_ids=True)
    got = got[got["k"] == "v1"]
    return {int((pd.Timestamp(t) - T0).total_seconds()): int(s) for t, s in zip(got["ts"], got["_sid"], strict=True)}


def _expected_eids(engine, removed=(), corrected=None, name: str = NAME) -> dict[str, dict]:
    """The matches a batch run over the archive as flagged finds (the reference matcher,
    row ids = source ids): eid -> measures."""
    from moirae.retract.flagged import apply_flags

    got = engine.archiver.read(SOURCE, T0, T0 + pd.Timedelta(hours=2), with_ids=True)
    got = got.assign(row_id=got["_sid"].astype("int64"))
    got = apply_flags(got, set(removed), corrected or {})
    got["ts"] = pd.to_datetime(got["ts"], utc=True)
    cp = compile_pattern(SQL, name=name, columns=["ts", "k", "x", "row_id"])
    return {event_id(name, m): {"n": m.measures["n"], "peak": m.measures["peak"]}
            for m in reference_matches(cp, got)}


def _attrs(engine, eid: str) -> dict:
    rec = engine.deploy.events.get(eid)
    return {"n": int(rec.attrs["n"]), "peak": float(rec.attrs["peak"])}


def _archived(engine, name: str = NAME) -> dict[str, float]:
    ev = engine.archiver.read(f"ev_{name}", T0, T0 + pd.Timedelta(hours=2))
    return {e: float(p) for e, p in zip(ev["eid"], ev["peak"], strict=True)}


def _status(engine, eid: str) -> str | None:
    return engine.retractions.store.status_of([eid]).get(eid, {}).get("status")


def _shown_revisions(engine, eid: str) -> list[tuple]:
    """The MEASURES revisions ``GET /api/events/{eid}`` shows (its view, through its model)."""
    from moirae.api.models import EventDetail
    from moirae.read.views import event_detail

    shown = EventDetail.model_validate(event_detail(engine, eid)).revisions
    return [(r["before"]["peak"], r["after"]["peak"], r["retraction"]) for r in shown]


def test_a_retraction_reveals_a_prevented_match_and_a_correction_revises_or_ends_one(engine):
    sid = _sids(engine)
    (live,) = _expected_eids(engine)  # the one match over the raw rows
    assert _archived(engine) == {live: 14.0}

    # 1. retracting the bad row at t = 10 s reveals A B B C (t = 0..20 s)
    out = engine.retract({"ids": [sid[10]]}, "a stuck reading", "ann", confirm=True)
    want = _expected_eids(engine, removed={sid[10]})
    (revealed,) = set(want) - {live}
    (live_w,) = _expected_eids(engine, name=WIDE)
    (revealed_w,) = set(_expected_eids(engine, removed={sid[10]}, name=WIDE)) - {live_w}
    assert sorted(out["patterns"]["raised"]) == sorted([revealed, revealed_w]) and revealed in out["raised"], out
    assert _archived(engine, SET) == {live_w: 14.0, revealed_w: 30.0}
    ev = engine.archiver.read(f"ev_{SET}", T0, T0 + pd.Timedelta(hours=2))
    assert set(ev["pattern"]) == {WIDE}  # the set's tag column
    assert _attrs(engine, revealed) == {"n": 2, "peak": 30.0} == want[revealed]
    assert _archived(engine) == {live: 14.0, revealed: 30.0}
    assert _status(engine, revealed) == "active"
    g = engine.provenance_graph(NAME)
    (sink,) = [i for i, e in g._query(f"SELECT id, payload->>'eid' FROM {g.v} WHERE kind = 'sink'", ())
               if e == revealed]
    assert {s for s, _ in g.sources_of(sink)} == {sid[0], sid[5], sid[15], sid[20]}
    # its sink id is formed as Spark forms the live sink ids (checked on the live match's archived row)
    from archive.ids import source_ids

    spec = engine.archiver.stream(f"ev_{NAME}")
    ev = engine.archiver.read(spec.name, T0, T0 + pd.Timedelta(hours=2))
    sinks = dict(g._query(f"SELECT payload->>'eid', id FROM {g.v} WHERE kind = 'sink'", ()))
    assert [int(x) for x in source_ids(f"sink:{NAME}", ev, spec.id_columns)] == [sinks[e] for e in ev["eid"]]
    polys = engine.deploy.flows[NAME].polys
    assert polys is not None and polys.get(NAME, [sink])[sink].variables() == {sid[0], sid[5], sid[15], sid[20]}
    fed = engine.retractions.lookup({"ids": [sid[15]]})
    assert revealed in {a["eid"] for a in fed["alerts"]}
    audit = engine.retractions  # the same event again is not raised twice
    assert audit.patterns.reconcile(out["id"], SOURCE, [(sid[10], T0 + pd.Timedelta(seconds=10))],
                                    (set(), {}), engine.retractions.store.active_flags(), "again",
                                    engine.query_graphs(), lambda *a: None)["raised"] == []

    # 2. correcting the live match's second B (14 -> 50) revises its MEASURES
    fix = engine.retract({"ids": [sid[50]]}, "the gauge read low", "bob", set_values={"x": 50.0}, confirm=True)
    assert sorted(fix["patterns"]["revised"]) == sorted([live, live_w]), fix
    assert _attrs(engine, live) == {"n": 2, "peak": 50.0}
    assert _archived(engine)[live] == 50.0
    assert [(r["before"]["peak"], r["after"]["peak"]) for r in audit.patterns.revisions(live)] == [(14.0, 50.0)]
    assert _shown_revisions(engine, live) == [(14.0, 50.0, fix["id"])]  # the API's event view shows them
    assert _shown_revisions(engine, revealed) == []
    back = engine.undo_retraction(fix["id"], "bob")
    assert sorted(back["patterns"]["revised"]) == sorted([live, live_w]), back
    assert _attrs(engine, live) == {"n": 2, "peak": 14.0} and _archived(engine)[live] == 14.0
    assert _shown_revisions(engine, live) == [(14.0, 50.0, fix["id"]), (50.0, 14.0, fix["id"])]

    # 3. correcting its first B to 3 breaks it: withdrawn, though no bound row was removed
    broke = engine.retract({"ids": [sid[45]]}, "the gauge read high", "bob", set_values={"x": 3.0}, confirm=True)
    assert live in broke["patterns"]["withdrawn"] and live in broke["retracted"] + broke["patterns"]["withdrawn"]
    assert _status(engine, live) == "retracted"
    undone = engine.undo_retraction(broke["id"], "bob")
    assert live in undone["restored"] and _status(engine, live) == "active"

    # 4. undoing the first retraction withdraws the match it revealed
    undone = engine.undo_retraction(out["id"], "ann")
    assert revealed in undone["withdrawn"] and _status(engine, revealed) == "retracted"
    assert _status(engine, live) == "active"
    assert set(_expected_eids(engine)) == {live}
    assert np.isclose(_attrs(engine, live)["peak"], 14.0)


def test_runs_start_after_the_last_gap_no_match_straddles():
    """Each key's re-match starts after its last gap of at least WITHIN before the span,
    keeping a few rows before it for PREV (moirae/retract/patterns.py:_anchored)."""
    from moirae.retract.patterns import PREV_ROWS, PatternQuery, _anchored

    cp = compile_pattern(SQL, name=NAME, columns=["ts", "k", "x", "moirae_pat_rid"], row_id="moirae_pat_rid")
    pq = PatternQuery(NAME, (cp,), None, "eid", "ts", SOURCE)
    secs = {"v1": [0, 10, 20, 30, 40, 50, 200, 210, 220], "v2": [0, 20, 40, 60, 80, 100, 120, 140, 160]}
    frame = pd.DataFrame([(T0 + pd.Timedelta(seconds=s), k, 1.0, i) for k, ss in secs.items() for i, s in enumerate(ss)],
                         columns=["ts", "k", "x", "moirae_pat_rid"])
    got = _anchored(frame, pq, "ts", T0 + pd.Timedelta(seconds=215))
    kept = {k: sorted(int((t - T0).total_seconds()) for t in g["ts"]) for k, g in got.groupby("k")}
    assert kept["v1"] == secs["v1"][6 - PREV_ROWS:]  # the gap lies between rows 5 and 6 (50 s -> 200 s)
    assert kept["v2"] == secs["v2"]  # no gap of WITHIN (60 s): every row read
