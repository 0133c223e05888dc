"""A row whose DEFINE cannot be evaluated (moirae/patterns/spark_processor.py,
moirae/patterns/spark_dead.py): it goes to the archive's dead letters with the reason,
the other rows are matched as if it had not come, and a replayed batch records it once."""

from __future__ import annotations

import pandas as pd

from archive import Archiver
from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.spark_dead import DeadLetterWriter
from moirae.patterns.spark_processor import IN_IDS, IN_TS, PatternCore, batch_matches, processor
from moirae.patterns.spark_schema import ROW_ID
from tests.patterns.processor_driver import Handle, State, Timer

SQL = """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
  PATTERN (A+ B) WITHIN INTERVAL '1' MINUTE DEFINE A AS x > 1 AND tag > 'a', B AS x <= 1)"""
T0 = pd.Timestamp("2024-01-01", tz="UTC")


def _frame(tags) -> pd.DataFrame:
    n = len(tags)
    return pd.DataFrame({"k": ["a"] * n, "ts": [T0 + pd.Timedelta(seconds=i) for i in range(n)],
                         "x": [5.0, 6.0, 0.0, 7.0, 8.0, 0.0][:n], "tag": tags,
                         ROW_ID: range(100, 100 + n), IN_IDS: [[100 + i] for i in range(n)],
                         IN_TS: [[T0 + pd.Timedelta(seconds=i)] for i in range(n)]})


def test_a_failing_row_is_a_dead_letter_and_the_others_match():
    cp = compile_pattern(SQL, name="p", columns={"k": "string", "ts": "timestamp", "x": "double", "tag": "string"},
                         row_id=ROW_ID)
    core = PatternCore(cp, "eid", "ts", ("n",))
    tags = ["b", "b", "b", 3, "b", "b"]  # row 103 holds a number where text is compared: DEFINE A fails
    out = batch_matches(core)(_frame(tags))
    assert [r[1].split(":")[0] for r in core.dead_seen] == ["pattern 'p'"]
    (row, reason), = core.dead_seen
    assert row[ROW_ID] == 103 and "DEFINE A" in reason
    clean = _frame(tags).drop(index=3)
    want = reference_matches(cp, clean)
    assert list(out["n"]) == [m.measures["n"] for m in want] == [2, 1]
    assert [list(p) for p in out["moirae_pat_prov_ids"]] == [[100, 101, 102], [104, 105]]


def test_the_live_processor_sets_a_failing_row_aside_the_same_way():
    cp = compile_pattern(SQL, name="p", columns={"k": "string", "ts": "timestamp", "x": "double", "tag": "string"},
                         row_id=ROW_ID)
    core = PatternCore(cp, "eid", "ts", ("n",))
    tags = ["b", "b", "b", 3, "b", "b"]
    state, timers = State(), set()
    p = processor(core)
    p.init(Handle(state, timers))
    early = int((T0 + pd.Timedelta(milliseconds=1500)).value // 1_000_000)  # rows 100, 101 fed, a run open
    out = list(p.handleInputRows(("a",), iter([_frame(tags)]), Timer(early)))
    assert not out and not core.dead_seen and timers
    end = int((T0 + pd.Timedelta(minutes=5)).value // 1_000_000)
    out = list(p.handleExpiredTimer(("a",), Timer(end), None))
    (row, reason), = core.dead_seen
    assert row[ROW_ID] == 103 and "DEFINE A" in reason
    got = pd.concat(out, ignore_index=True)
    assert list(got["n"]) == [2, 1]
    assert [list(x) for x in got["moirae_pat_prov_ids"]] == [[100, 101, 102], [104, 105]]


def test_dead_letters_reach_the_archive_once_per_batch(pg):
    Archiver(pg)  # creates the archive's tables
    writer = DeadLetterWriter(pg.dsn, pg.schema, "s")
    dead = [({"k": "a", "ts": T0, "tag": 3}, "pattern 'p': DEFINE A failed on row 103")]
    assert writer.write(7, dead) == 1
    assert writer.write(7, dead) == 0  # the same batch replayed
    assert writer.write(8, dead) == 1
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT batch_id, reason, row_data->>'ts' FROM moirae_dead_letters WHERE stream = 's' "
                    "ORDER BY batch_id")
        got = cur.fetchall()
    assert got == [(7, dead[0][1], T0.isoformat()), (8, dead[0][1], T0.isoformat())]
