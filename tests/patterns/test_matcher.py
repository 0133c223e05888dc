"""The compiled matcher's contract: state, WITHIN, watermarks, output (docs/PATTERNS.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moirae.patterns import (
    KeyState,
    Matcher,
    PatternError,
    PatternStateError,
    PredicateEvaluationError,
    compile_pattern,
    reference_matches,
)

SPEEDING = """SELECT * FROM cars MATCH_RECOGNIZE (
  PARTITION BY car ORDER BY ts
  MEASURES FIRST(S.ts) AS since, MAX(S.speed) AS top, COUNT(S.*) AS n
  PATTERN (S S)
  DEFINE S AS speed > 100)"""


def frame(speeds, car="c1", start=0, step=1.0):
    n = len(speeds)
    return pd.DataFrame({"car": [car] * n, "ts": [start + step * i for i in range(n)],
                         "row_id": [f"{car}-{start + i}" for i in range(n)], "speed": speeds})


def test_the_papers_speeding_example():
    """T 3: (speed > 100) . (speed > 100) is detected at the fifth event of Table 1's stream."""
    cp = compile_pattern(SPEEDING, name="speeding", columns=["car", "ts", "row_id", "speed"])
    got, st = Matcher(cp).advance(None, frame([80, 90, 95, 105, 110, 90]))
    assert [(m.first_row_id, m.last_row_id, m.measures) for m in got] == [
        ("c1-3", "c1-4", {"since": 3.0, "top": 110.0, "n": 2})]
    assert st is not None and st.runs == []


def test_state_survives_bytes_between_batches():
    text = """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY car ORDER BY ts MEASURES AVG(A.speed) AS v
              PATTERN (A{2,} B) WITHIN 50 DEFINE A AS speed > PREV(speed), B AS speed < LAST(A.speed) / 2)"""
    cp = compile_pattern(text, name="climb")
    rng = np.random.default_rng(7)
    rows = frame(list(rng.integers(0, 60, 400)))
    want = reference_matches(cp, rows)
    m, st, got = Matcher(cp), None, []
    for lo in range(0, 400, 37):
        out, st = m.advance(st, rows.iloc[lo:lo + 37])
        got += out
        st = KeyState.from_bytes(st.to_bytes(), pattern="climb")
        m = Matcher(cp)  # a fresh process: the automaton is rebuilt, the state is not
    out, _ = m.finish(st)
    assert want and got + out == want


def test_state_is_bounded_by_within_and_the_watermark_closes_runs():
    text = """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY car ORDER BY ts MEASURES COUNT(A.*) AS n
              PATTERN (A+) WITHIN INTERVAL '10' SECOND DEFINE A AS speed > 0)"""
    cp = compile_pattern(text, name="moving")
    m = Matcher(cp)
    got, st = m.advance(None, frame([5] * 1000, step=0.5))
    assert max(x.measures["n"] for x in got) == 20  # 10 s of rows every 0.5 s
    assert st.rows_held <= 21 and st.nbytes < 10_000
    assert m.next_deadline(st) == int((st.runs[0][0] * 0.5 + 10) * 1e9)
    none, st = m.advance(st, None, watermark=499.0)
    assert none == []
    closed, st = m.advance(st, None, watermark=510.0)
    assert [x.last_row_id for x in closed] == ["c1-999"] and st.runs == []


def test_many_keys_in_one_frame_and_the_output_frame():
    cp = compile_pattern(SPEEDING, name="speeding")
    rows = pd.concat([frame([120, 130, 140, 150], car="a"), frame([120, 10, 130, 140], car="b")])
    rows["ts"] = pd.to_datetime(rows["ts"], unit="s", utc=True)
    m = Matcher(cp)
    got, states = m.advance_frame({}, rows.sample(frac=1, random_state=3))
    assert sorted(states) == [("a",), ("b",)]
    df = m.to_frame(got)
    assert list(df.columns) == ["pattern", "car", "match_number", "first_ts", "last_ts", "first_row_id",
                                "last_row_id", "row_ids", "symbols", "since", "top", "n"]
    assert df[["car", "match_number", "first_row_id"]].values.tolist() == [
        ["a", 1, "a-0"], ["a", 2, "a-2"], ["b", 1, "b-2"]]
    assert df["first_ts"].iloc[0] == pd.Timestamp(0, tz="UTC") and df["row_ids"].iloc[2] == ["b-2", "b-3"]


def test_rows_out_of_order_and_foreign_state_are_refused():
    cp = compile_pattern(SPEEDING, name="speeding")
    m = Matcher(cp)
    _, st = m.advance(None, frame([120, 130], start=10))
    with pytest.raises(PatternError, match="earlier than rows fed before"):
        m.advance(st, frame([120], start=3))
    with pytest.raises(PatternError, match="rows of key .'c2',. given with the state of key .'c1',."):
        m.advance(st, frame([120], car="c2", start=20))
    with pytest.raises(PatternStateError, match="given to pattern 'other'"):
        KeyState.from_bytes(st.to_bytes(), pattern="other")
    with pytest.raises(PatternStateError, match="unreadable"):
        KeyState.from_bytes(b"junk")


def test_a_predicate_that_cannot_be_evaluated_names_the_row():
    text = "SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY car ORDER BY ts PATTERN (S) DEFINE S AS speed > 'fast')"
    cp = compile_pattern(text, name="bad")
    rows = frame([1, 2])
    rows["speed"] = pd.Series(["x", None], dtype=object)
    rows.loc[0, "speed"] = 3
    with pytest.raises(PredicateEvaluationError, match=r"pattern 'bad': DEFINE S failed on row 'c1-0'"):
        Matcher(cp).advance(None, rows)


def test_a_frame_of_many_keys_matches_as_each_keys_rows_alone():
    """``advance_frame`` (each column converted once, sliced per key) finds what
    ``advance`` finds over each key's rows alone, over two batches: the same matches in
    the same order and the same states, with two key columns, a key that is None, and
    a nullable boolean column that has NA in some keys only (objects there, bools elsewhere)."""
    from moirae.patterns.match import key_rows

    sql = ("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k, j ORDER BY ts MEASURES COUNT(A.*) AS n, "
           "LAST(B.x) AS bx PATTERN (A{2,} B) WITHIN INTERVAL '60' SECOND "
           "DEFINE A AS x > 3 AND f, B AS x <= 3 OR f IS NULL)")
    cp = compile_pattern(sql, name="p", columns={"k": "string", "j": "double", "ts": "timestamp", "x": "double",
                                                 "f": "boolean"}, row_id="rid")
    rng = np.random.default_rng(3)
    n = 400
    f = pd.array(rng.choice([True, False], n), dtype="boolean")
    f[(rng.random(n) < 0.1) & (np.arange(n) % 3 == 0)] = pd.NA
    df = pd.DataFrame({"k": rng.choice(["a", "b", "c", None], n), "j": rng.integers(0, 2, n),
                       "ts": pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.integers(0, 300, n)),
                                                                                    unit="s"),
                       "x": rng.integers(0, 10, n) * 1.0, "f": f, "rid": np.arange(n)})
    m = Matcher(cp)

    def one_by_one(states, rows):
        new, out = dict(states), []
        for key, part in key_rows(rows, cp.partition_by, cp.order_by, cp.row_id):
            got, st = m.advance(new.get(key), part)
            out += got
            if st is not None:
                new[key] = st
        return out, new

    want_a, st_a = one_by_one({}, df.iloc[:200])
    got_a, st_b = m.advance_frame({}, df.iloc[:200])
    want, st_want = one_by_one(st_a, df.iloc[200:])
    got, st_got = m.advance_frame(st_b, df.iloc[200:])
    assert want_a and want
    assert [repr(x) for x in got_a] == [repr(x) for x in want_a]
    assert [repr(x) for x in got] == [repr(x) for x in want]
    assert sorted(map(repr, st_got.items())) == sorted(map(repr, st_want.items()))
