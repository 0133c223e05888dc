"""Several patterns deployed as one event-query (``Engine.pattern_queries``,
moirae/patterns/spark_set.py): every pattern's matches are archived as events with the
event id the pattern gives alone, tagged with the pattern's name, and each match's
provenance is its own bound rows; patterns over other keys are refused at deploy time."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

from archive import Database
from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.errors import PatternError
from moirae.patterns.match import Match
from moirae.patterns.spark_processor import event_id
from tests.moirae.scenario_small import wait
from tests.patterns.test_pattern_provenance import LATENESS_S, SCHEMA, SOURCE, SQL, T0, _files, _rows, _write

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

NAME = "many"
OTHER = f"""SELECT * FROM {SOURCE} MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES LAST(B.x) AS last_x
  PATTERN (A B) WITHIN INTERVAL '30' SECOND
  DEFINE A AS x >= 5 AND x < 8, B AS x < 5)"""
PATTERNS = {"surge": SQL, "drop": OTHER}


def test_pattern_queries_archive_each_patterns_matches_as_alone(pg_dsn, tmp_path, spark):
    from tests.conftest import _backend_dsn
    from tests.engine_factory import make_engine

    if pg_dsn != _backend_dsn("embedded"):
        pytest.skip("one backend is enough for the engine's pattern queries")
    db = Database(pg_dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    inbox = tmp_path / "in"
    inbox.mkdir()
    rows = _rows(seed=5, span_s=240)
    end = pd.DataFrame({"ts": [T0 + pd.Timedelta(hours=1)], "k": ["clock"], "x": [-1.0]})
    for i, part in enumerate([*_files(rows), end]):
        _write(inbox, i, part)
    refs = {n: reference_matches(compile_pattern(s, name=n, columns=["ts", "k", "x"]),
                                 rows.assign(row_id=np.arange(len(rows)))) for n, s in PATTERNS.items()}
    assert all(refs.values()), "every pattern should match"
    engine = make_engine(db, tmp_path / "data", spark={"trigger": "200ms"},
                         archive={"chunk_span": "10m", "chunk_target_rows": 0})
    try:
        df = spark.readStream.schema(SCHEMA).csv(str(inbox))
        engine.source(SOURCE, df, ts="ts", lateness=f"{LATENESS_S} seconds")
        by_x = OTHER.replace("PARTITION BY k", "PARTITION BY x")
        with pytest.raises(PatternError, match="pattern 'by_x': PARTITION BY x differs from pattern 'surge'"):
            engine.pattern_queries("refused", {"surge": SQL, "by_x": by_x})
        engine.pattern_queries(NAME, PATTERNS)
        engine.start()
        total = sum(map(len, refs.values()))
        wait(lambda: len(engine.archiver.read(f"ev_{NAME}", T0, T0 + pd.Timedelta(hours=2))) >= total,
             what="every match as an event")
        archived = engine.archiver.read(SOURCE, T0, T0 + pd.Timedelta(hours=2), with_ids=True)
        sids = {(pd.Timestamp(t).tz_convert("UTC"), k): int(s) for t, k, s in
                zip(archived["ts"], archived["k"], archived["_sid"], strict=True)}
        sid = [sids[(t, k)] for t, k in zip(rows["ts"], rows["k"], strict=True)]
        events = engine.archiver.read(f"ev_{NAME}", T0, T0 + pd.Timedelta(hours=2))
        assert len(events) == total
        for name, ref in refs.items():
            mine = events[events["pattern"] == name]
            want = {event_id(name, Match(name, m.key, 0, None, None, sid[m.first_row_id], sid[m.last_row_id], ()))
                    for m in ref}
            assert set(mine["eid"]) == want, name
        assert events.loc[events["pattern"] == "drop", "n"].isna().all()
        assert events.loc[events["pattern"] == "surge", "last_x"].isna().all()
    finally:
        engine.close()
        db.drop_schema()
        db.close()
