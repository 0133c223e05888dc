"""The pattern's stateful processor (moirae/patterns/spark_processor.py) driven as Spark
drives it, without a JVM: per micro-batch, each key's new rows, then the key's event-time
timers the watermark passed. Over hypothesis-free seeded streams whose rows arrive out
of order (within the lateness), cut into batches anyhow and with the processor rebuilt
from its saved state bytes between batches (a restart), the matches are the reference
matcher's, each once, with its bound rows as provenance."""

from __future__ import annotations

import pandas as pd
import pytest

from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.spark_processor import PatternCore, processor
from moirae.patterns.spark_schema import PROV_IDS, ROW_ID
from tests.patterns.processor_driver import drive, seeded_stream

PATTERNS = {
    "greedy": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (A{2,} B) WITHIN INTERVAL '25' SECOND DEFINE A AS x > 4, B AS x <= 4 AND x < LAST(A.x))""",
    "skip_till_any": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (SKIP_TILL_ANY(A, B, C)) WITHIN INTERVAL '20' SECOND
        DEFINE A AS x = 1, B AS x = 2, C AS x = 3)""",
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("which", sorted(PATTERNS))
def test_batched_out_of_order_and_restarted_equals_the_reference(which, seed):
    cp = compile_pattern(PATTERNS[which], name="p", columns={"k": "string", "x": "double", "ts": "timestamp"},
                         row_id=ROW_ID)
    core = PatternCore(cp, "eid", "ts", ("n",))
    rows, batches = seeded_stream(seed)
    got, saved = drive(lambda: processor(core), rows, batches, check_late=True)
    ref = reference_matches(cp, rows)
    assert ref, "the stream should match"
    assert got["eid"].is_unique
    want = sorted((m.key[0], pd.Timestamp(m.last_ts), m.measures["n"], tuple(1000 + r for r, _ in m.rows))
                  for m in ref)
    have = sorted((r["k"], r["ts"], r["n"], tuple(r[PROV_IDS])) for r in got.to_dict("records"))
    assert have == want
    assert all(s.value is None for s, _ in saved.values()), "an idle key keeps state past WITHIN"
