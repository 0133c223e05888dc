"""A pattern event-query's provenance through the engine (moirae/patterns/spark_operator.py,
A 3-4, HUKA 4-5): matches the processor holds until they can no longer grow (a greedy
end waiting for the key's next row, or a run released by its WITHIN deadline) reach
Ananke's graph with their bound rows, none of which was labelled expired before the
match came, over rows arriving out of order and across a restart; retracting one bound
row of a match withdraws it, retracting an unrelated row does not."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

from archive import Database
from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.match import Match
from moirae.patterns.spark_processor import event_id
from tests.moirae.scenario_small import wait

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

NAME, SOURCE = "surge", "pings"
SCHEMA = "ts timestamp, k string, x double"
LATENESS_S, WITHIN_S = 10, 40
# a run starts at every row x >= 5 (SKIP TO NEXT ROW: matches overlap) and grows while
# x < 8: it ends at the key's next row x >= 8 or at its deadline, both after the
# watermark has passed its last row
SQL = f"""SELECT * FROM {SOURCE} MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES COUNT(B.*) AS n, AVG(B.x) AS bx
  AFTER MATCH SKIP TO NEXT ROW
  PATTERN (A B+) WITHIN INTERVAL '{WITHIN_S}' SECOND
  DEFINE A AS x >= 5, B AS x < 8)"""
T0 = pd.Timestamp("2025-01-01", tz="UTC")


def _rows(seed: int = 3, span_s: int = 360) -> pd.DataFrame:
    """Four sparse keys (a row every 4-15 s) and a clock key (every 2 s, never matching)
    that moves the watermark while the others are silent."""
    rng = np.random.default_rng(seed)
    parts = [pd.DataFrame({"ts": T0 + pd.to_timedelta(np.arange(0, span_s, 2), unit="s"), "k": "clock", "x": -1.0})]
    for k in ("v1", "v2", "v3", "v4"):
        secs = np.cumsum(rng.integers(4, 16, span_s // 4))
        secs = secs[secs < span_s]
        parts.append(pd.DataFrame({"ts": T0 + pd.to_timedelta(secs, unit="s"), "k": k,
                                   "x": rng.integers(0, 10, len(secs)).astype(float)}))
    return pd.concat(parts).sort_values(["ts", "k"], kind="stable").reset_index(drop=True)


def _files(rows: pd.DataFrame, seed: int = 4) -> list[pd.DataFrame]:
    """Rows by arrival (each up to 8 s after its event time, under the 10 s lateness, so
    none is dropped), cut into 20 s of arrival per file: out of order within and across files."""
    rng = np.random.default_rng(seed)
    arrival = rows["ts"] + pd.to_timedelta(rng.integers(0, 9, len(rows)), unit="s")
    cut = (arrival - T0).dt.total_seconds().floordiv(20).astype(int)
    order = rows.assign(_c=cut, _a=arrival).sort_values(["_a"], kind="stable")
    return [g.drop(columns=["_c", "_a"]) for _, g in order.groupby("_c", sort=True)]


def _write(folder, i: int, part: pd.DataFrame) -> None:
    tmp = folder / f".p{i:03d}.csv"
    part.assign(ts=part["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(tmp, index=False, header=False,
                                                                       columns=["ts", "k", "x"])
    tmp.rename(folder / f"p{i:03d}.csv")


def _engine(db, data, spark, inbox):
    from tests.engine_factory import make_engine

    engine = make_engine(db, data, spark={"trigger": "200ms"},
                         archive={"chunk_span": "10m", "chunk_target_rows": 0})
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).csv(str(inbox))
    engine.source(SOURCE, df, ts="ts", lateness=f"{LATENESS_S} seconds")
    engine.pattern_query(NAME, SQL)
    engine.start()
    return engine


def _drain(engine) -> None:
    for q in engine.spark.streams.active:
        q.processAllAvailable()


def _graph(engine) -> tuple[dict, dict, dict]:
    """The pattern query's Ananke graph: sink vertex id -> (eid, stamp W), sink id -> its
    source ids, source id -> the stamp of its 'expired' label."""
    g = engine.provenance_graph(NAME)
    sinks = {i: (eid, pd.Timestamp(w)) for i, eid, w in
             g._query(f"SELECT id, payload->>'eid', ts FROM {g.v} WHERE kind = 'sink'", ())}
    edges: dict[int, set] = {}
    for s, k in g._query(f"SELECT source_id, sink_id FROM {g.e}", ()):
        edges.setdefault(k, set()).add(s)
    labels = {i: pd.Timestamp(w) for i, w in g._query(f"SELECT vertex_id, ts FROM {g.lab} WHERE kind = 'source'", ())}
    return sinks, edges, labels


@pytest.fixture(scope="module")
def run(pg_dsn, tmp_path_factory, spark):
    """The pattern query over the stream, stopped halfway and restarted from its
    checkpoint; yields the running engine, the rows (with their source ids), the
    reference matches, and the graph as it stood at the restart."""
    from tests.conftest import _backend_dsn

    if pg_dsn != _backend_dsn("embedded"):
        pytest.skip("one backend is enough for the engine's pattern provenance")
    db = Database(pg_dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    base = tmp_path_factory.mktemp("pattern_prov")
    inbox = base / "in"
    inbox.mkdir()
    rows = _rows()
    files = _files(rows)
    half = len(files) // 2
    for i, part in enumerate(files[:half]):
        _write(inbox, i, part)
    engine = _engine(db, base / "data", spark, inbox)
    try:
        wait(lambda: len(engine.archiver.read(SOURCE, T0, T0 + pd.Timedelta(hours=1))) >= sum(map(len, files[:half])),
             what="the first half archived")
        _drain(engine)
        before = _graph(engine)
        late_before = engine.deploy.flows[NAME].logic.stats.late
    finally:
        engine.close()
    end = pd.DataFrame({"ts": [T0 + pd.Timedelta(hours=1)], "k": ["clock"], "x": [-1.0]})  # passes everything
    for i, part in enumerate([*files[half:], end], start=half):
        _write(inbox, i, part)
    cp = compile_pattern(SQL, name=NAME, columns=["ts", "k", "x"])
    ref = reference_matches(cp, rows.assign(row_id=np.arange(len(rows))))
    engine = _engine(db, base / "data", spark, inbox)
    try:
        wait(lambda: len(engine.archiver.read(f"ev_{NAME}", T0, T0 + pd.Timedelta(hours=2))) >= len(ref),
             what="every match as an event")
        _drain(engine)
        archived = engine.archiver.read(SOURCE, T0, T0 + pd.Timedelta(hours=2), with_ids=True)
        ids = {(pd.Timestamp(t).tz_convert("UTC"), k): int(s) for t, k, s in
               zip(archived["ts"], archived["k"], archived["_sid"], strict=True)}
        rows["sid"] = [ids[(t, k)] for t, k in zip(rows["ts"], rows["k"], strict=True)]
        yield engine, rows, ref, before, late_before
    finally:
        engine.close()
        db.drop_schema()
        db.close()


def test_deferred_matches_keep_their_provenance_across_a_restart(run):
    engine, rows, ref, (sinks0, _, labels0), late_before = run
    events = engine.archiver.read(f"ev_{NAME}", T0, T0 + pd.Timedelta(hours=2))
    assert len(events) == len(ref) and set(events["eid"]) == {_eid(m, rows) for m in ref}
    assert len(sinks0) < len(ref), "some match should come after the restart"
    sinks, edges, labels = _graph(engine)
    late = engine.deploy.flows[NAME].logic.stats.late
    by_eid = {eid: sid for sid, (eid, _) in sinks.items()}
    assert (late_before, late, len(by_eid)) == (0, 0, len(events)), "matches counted late: no provenance"
    want = sorted(tuple(sorted(rows["sid"].iloc[[r for r, _ in m.rows]])) for m in ref)
    assert sorted(tuple(sorted(edges.get(by_eid[e], ()))) for e in events["eid"]) == want
    # A 3: once labelled expired, a source tuple is in no later sink tuple. Stamps compare
    # within one run of ANK-1; a label from before the restart precedes every sink after it.
    early = []
    for sid, (eid, w) in sinks.items():
        for src in edges.get(sid, ()):
            if src in labels0 and (sid not in sinks0 or labels0[src] <= w):
                early.append((eid, src, "labelled before the restart"))
            elif src in labels and src not in labels0 and sid not in sinks0 and labels[src] <= w:
                early.append((eid, src, f"labelled at {labels[src]}, sink at {w}"))
    assert not early, early[:5]
    assert labels, "the watermark should have expired some source tuples"


def test_retracting_a_bound_row_withdraws_the_match_and_an_unrelated_row_does_not(run):
    engine, rows, ref, _, _ = run
    m = next(m for m in ref if len(m.rows) >= 3)
    in_any = {r for other in ref for r, _ in other.rows}
    key_rows = rows.index[rows["k"] == m.key[0]]
    unrelated = next(i for i in key_rows if i not in in_any and rows["ts"].iloc[i] > pd.Timestamp(m.first_ts))
    out = engine.retract({"ids": [int(rows["sid"].iloc[unrelated])]}, "a row no match binds", "test", confirm=True)
    assert out["retracted"] == [], out
    middle = sorted(r for r, _ in m.rows)[1]  # one bound row: the match is the product of all of them
    out = engine.retract({"ids": [int(rows["sid"].iloc[middle])]}, "sensor glitch", "test", confirm=True)
    withdrawn = {_eid(o, rows) for o in ref if middle in {r for r, _ in o.rows}}
    assert _eid(m, rows) in withdrawn and set(out["retracted"]) == withdrawn, out


def _eid(m, rows: pd.DataFrame) -> str:
    """A reference match's event id (its key, first and last rows' source ids)."""
    sid = rows["sid"].tolist()
    return event_id(NAME, Match(NAME, m.key, 0, None, None, sid[m.first_row_id], sid[m.last_row_id], ()))
