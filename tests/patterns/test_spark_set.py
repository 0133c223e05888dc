"""Several patterns in one live operator (moirae/patterns/spark_set.py): each pattern's
matches through the shared operator are exactly those the reference matcher finds for
it alone (same event id, measures and provenance), driven as Spark drives the processor
(batches cut anyhow, rows out of order, the processor rebuilt from its saved state
between batches) and through real Spark with a restart from the checkpoint. Patterns
over other keys are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ananke.ids import PROV
from ananke.query import ProvQuery
from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.errors import PatternSyntaxError
from moirae.patterns.spark_buffer import KeyBuffer
from moirae.patterns.spark_operator import compile_live, pattern_set_stream, rocksdb_start
from moirae.patterns.spark_processor import PatternCore, PatternSet, event_id, processor
from moirae.patterns.spark_schema import PROV_IDS, ROW_ID
from tests.patterns.processor_driver import drive, seeded_stream

COLUMNS = {"k": "string", "x": "double", "ts": "timestamp"}
#: different WITHINs, skips and engines (DFA, bound-row NFA, PREV), sharing ``x > 4``
PATTERNS = {
    "greedy": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (A{2,} B) WITHIN INTERVAL '25' SECOND DEFINE A AS x > 4, B AS x <= 4 AND x < LAST(A.x))""",
    "any": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (SKIP_TILL_ANY(A, B, C)) WITHIN INTERVAL '20' SECOND
        DEFINE A AS x = 1, B AS x = 2, C AS x = 3)""",
    "rise": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES AVG(B.x) AS bx, FIRST(A.ts) AS since AFTER MATCH SKIP TO NEXT ROW
        PATTERN (A B+ C) WITHIN INTERVAL '40' SECOND
        DEFINE A AS x > 4 AND x < 7, B AS x > 4, C AS NOT (x > 4))""",
    "climb": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (A{2}) WITHIN INTERVAL '15' SECOND DEFINE A AS x > PREV(x))""",
}


def _compiled(names=None) -> list:
    return [compile_pattern(PATTERNS[n], name=n, columns=COLUMNS, row_id=ROW_ID) for n in names or PATTERNS]


def _measures(cp) -> tuple[str, ...]:
    return tuple(n for n in cp.measure_names if n not in ("eid", "ts", "pattern", *cp.partition_by))


def _drive(patterns, rows: pd.DataFrame, batches: list[pd.DataFrame]) -> tuple[pd.DataFrame, dict]:
    """Every batch through fresh processors whose state comes only from the saved store."""
    return drive(lambda: processor(patterns), rows, batches)


def _norm(v) -> str:
    return repr(pd.Timestamp(v).tz_convert("UTC") if isinstance(v, pd.Timestamp) else
                v.item() if isinstance(v, np.generic) else v)


def _want(cp, rows: pd.DataFrame) -> list[tuple]:
    return sorted((event_id(cp.name, m), m.key[0], pd.Timestamp(m.last_ts),
                   tuple(_norm(m.measures[n]) for n in _measures(cp)), tuple(1000 + r for r, _ in m.rows))
                  for m in reference_matches(cp, rows))


def _have(cp, got: pd.DataFrame) -> list[tuple]:
    return sorted((r["eid"], r["k"], r["ts"], tuple(_norm(r[n]) for n in _measures(cp)), tuple(r[PROV_IDS]))
                  for r in got.to_dict("records"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_pattern_in_one_operator_matches_as_alone(seed):
    rows, batches = seeded_stream(seed)
    cps = _compiled()
    ps = PatternSet([PatternCore(cp, "eid", "ts", _measures(cp)) for cp in cps], tag="pattern")
    got, saved = _drive(ps, rows, batches)
    assert got["eid"].is_unique, "a match delivered twice"
    assert list(got.columns) == ps.out_columns
    for cp in cps:
        want = _want(cp, rows)
        assert want, f"pattern {cp.name} should match"
        mine = got[got["pattern"] == cp.name]
        assert _have(cp, mine) == want, cp.name
        for n in {m for c in cps for m in _measures(c)} - set(_measures(cp)):
            assert mine[n].isna().all(), f"{cp.name}'s rows carry another pattern's measure {n}"
        alone, _ = _drive(PatternCore(cp, "eid", "ts", _measures(cp)), rows, batches)
        assert _have(cp, alone) == want, f"{cp.name} alone"
    for state, _ in saved.values():  # past every WITHIN a key keeps only PREV's rows (climb's one row)
        buf = KeyBuffer.from_bytes(state.value[0]) if state.value is not None else KeyBuffer()
        assert buf.pending is None
        assert buf.prov is None or (buf.prov.t >= buf.fed_ns - 2 * ps.within_ns).all(), "provenance past WITHIN"
        assert buf.own_t is None or buf.own_t >= buf.fed_ns - 2 * ps.within_ns, "provenance past WITHIN"
        for cp, st in zip(cps, buf.matchers, strict=False):
            assert st is None or (not st.runs and st.rows_held <= cp.max_prev), f"{cp.name} keeps state past WITHIN"


def test_patterns_over_other_keys_are_refused():
    other = PATTERNS["greedy"].replace("PARTITION BY k", "PARTITION BY x")
    cps = [*_compiled(["greedy"]), compile_pattern(other, name="by_x", columns=COLUMNS, row_id=ROW_ID)]
    with pytest.raises(PatternSyntaxError, match=r"pattern 'by_x': PARTITION BY x differs from pattern 'greedy'"):
        PatternSet([PatternCore(cp, "eid", "ts", ()) for cp in cps], tag="pattern")


@pytest.mark.spark
def test_one_operator_in_spark_matches_each_alone_across_a_restart(spark, tmp_path):
    from tests.patterns.test_spark_runtime import LATENESS_S, SCHEMA, T0, _drain, _files, _rows, _write

    rows = _rows(n=96, seed=11)
    files = _files(rows)
    end = pd.DataFrame({"k": ["zz"], "x": [0.0], "ts": [T0 + pd.Timedelta(hours=2)]})
    inbox, checkpoint = tmp_path / "in", tmp_path / "ck"
    inbox.mkdir()
    batches: dict[int, pd.DataFrame] = {}
    names = ["greedy", "rise", "climb"]

    def start():
        df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))
              .withWatermark("ts", f"{LATENESS_S} seconds"))
        pq = ProvQuery()
        cps = [compile_live(n, PATTERNS[n], df.schema, "ts") for n in names]
        sink = pattern_set_stream(pq.source(df, "s", "ts", cols=["k", "x"]), cps, stream="s",
                                  payload=["k", "x"]).sink("ps")
        assert pq.U == pd.Timedelta(seconds=40)  # the largest WITHIN

        def collect(batch, batch_id: int) -> None:
            batches[batch_id] = batch.toPandas()

        with rocksdb_start(spark):
            q = (sink.df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="100 milliseconds").start())
        return q, cps

    half = len(files) // 2
    for i, part in enumerate(files[:half]):
        _write(inbox, i, part)
    q, cps = start()
    try:
        _drain(q)
    finally:
        q.stop()
    before = sum(len(b) for b in batches.values())
    for i, part in enumerate([*files[half:], end], start=half):
        _write(inbox, i, part)
    q, _ = start()
    try:
        _drain(q, end["ts"].iloc[0] - pd.Timedelta(seconds=LATENESS_S))
        assert q.exception() is None
    finally:
        q.stop()
    got = pd.concat(list(batches.values()), ignore_index=True)
    assert got["eid"].is_unique, "a match delivered twice"
    ref_rows = rows.assign(**{ROW_ID: np.arange(len(rows))})
    first = set(pd.concat(files[:half]).index)
    total = 0
    for cp in cps:
        ref = reference_matches(cp, ref_rows)
        total += len(ref)
        want = sorted((m.key[0], pd.Timestamp(m.last_ts).tz_convert("UTC"),
                       tuple(sorted(rows["ts"].iloc[[r for r, _ in m.rows]]))) for m in ref)
        mine = got[got["pattern"] == cp.name]
        have = sorted((r["k"], _utc(r["ts"]), tuple(sorted(_utc(p["ts"]) for p in r[PROV])))
                      for r in mine.to_dict("records"))
        assert have == want, cp.name
        if cp.name == "greedy":
            spanning = [m for m in ref if {r for r, _ in m.rows} & first and {r for r, _ in m.rows} - first]
            assert spanning, "some match should need state from before the restart"
    assert before < total


def _utc(v) -> pd.Timestamp:
    t = pd.Timestamp(v)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
