"""The pattern's stateful processor (moirae/patterns/spark_processor.py) driven as Spark
drives it, without a JVM: per micro-batch, each key's new rows, then the key's event-time
timers the watermark passed. Over hypothesis-free seeded streams whose rows arrive out
of order (within the lateness), cut into batches anyhow and with the processor rebuilt
from its saved state bytes between batches (a restart), the matches are the reference
matcher's, each once, with its bound rows as provenance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.spark_processor import IN_IDS, IN_TS, PatternCore, processor
from moirae.patterns.spark_schema import PROV_IDS, ROW_ID

T0 = pd.Timestamp("2024-01-01", tz="UTC")
LATENESS_MS = 30_000
PATTERNS = {
    "greedy": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (A{2,} B) WITHIN INTERVAL '25' SECOND DEFINE A AS x > 4, B AS x <= 4 AND x < LAST(A.x))""",
    "skip_till_any": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (SKIP_TILL_ANY(A, B, C)) WITHIN INTERVAL '20' SECOND
        DEFINE A AS x = 1, B AS x = 2, C AS x = 3)""",
}


class _State:
    def __init__(self, value=None) -> None:
        self.value = value

    def exists(self) -> bool:
        return self.value is not None

    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class _Handle:
    def __init__(self, state: _State, timers: set) -> None:
        self.state, self.timers = state, timers

    def getValueState(self, name, schema):  # noqa: N802 - pyspark's name
        return self.state

    def listTimers(self):  # noqa: N802
        return iter(sorted(self.timers))

    def deleteTimer(self, t) -> None:  # noqa: N802
        self.timers.discard(t)

    def registerTimer(self, t) -> None:  # noqa: N802
        self.timers.add(t)


class _Timer:
    def __init__(self, wm: int) -> None:
        self.wm = wm

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802
        return self.wm


def _stream(seed: int) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    rng = np.random.default_rng(seed)
    n = 150
    secs = np.sort(rng.choice(n * 2, n, replace=False))
    rows = pd.DataFrame({"k": rng.choice(["a", "b"], n), "x": rng.integers(0, 8, n).astype(float),
                         "ts": [T0 + pd.Timedelta(seconds=int(s)) for s in secs]})
    rows[ROW_ID] = np.arange(n)
    rows[IN_IDS] = [[1000 + i] for i in range(n)]
    rows[IN_TS] = [[t] for t in rows["ts"]]
    # arrival: each row delayed by up to 25 s (under the 30 s lateness), cut into batches anyhow
    arrival = rows["ts"] + pd.to_timedelta(rng.integers(0, 25, n), unit="s")
    order = rows.assign(_arr=arrival).sort_values("_arr", kind="stable").drop(columns="_arr")
    cuts = np.sort(rng.choice(np.arange(1, n), 25, replace=False))
    return rows, [order.iloc[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("which", sorted(PATTERNS))
def test_batched_out_of_order_and_restarted_equals_the_reference(which, seed):
    cp = compile_pattern(PATTERNS[which], name="p", columns={"k": "string", "x": "double", "ts": "timestamp"},
                         row_id=ROW_ID)
    core = PatternCore(cp, "eid", "ts", ("n",))
    rows, batches = _stream(seed)
    saved: dict[str, tuple[_State, set]] = {}  # per key: what Spark's state store keeps
    out: list[pd.DataFrame] = []
    wm, max_ms = -1, None
    end = [pd.DataFrame(columns=rows.columns)] * 3  # no-data batches once the input has ended
    flush = rows.iloc[:0]
    for i, batch in enumerate([*batches, flush, *end]):
        if i == len(batches):  # the input ended: the watermark passes everything
            wm = int(rows["ts"].max().value // 1_000_000) + 60_000
        assert not len(batch) or (batch["ts"].astype("int64") // 1_000_000 > wm).all(), "a late row"
        procs = {}
        for key in {*saved, *batch["k"]}:  # a new processor per batch: state only from the store
            state, timers = saved.setdefault(key, (_State(), set()))
            p = processor(core)
            p.init(_Handle(state, timers))
            procs[key] = p
        for key, part in batch.groupby("k"):
            out += list(procs[key].handleInputRows((key,), iter([part]), _Timer(wm)))
        for key, p in procs.items():
            due = sorted(t for t in saved[key][1] if t <= wm)
            if due:
                saved[key][1].difference_update(due)
                out += list(p.handleExpiredTimer((key,), _Timer(wm), None))
        if len(batch):
            top = int(batch["ts"].max().value // 1_000_000)
            max_ms = top if max_ms is None else max(max_ms, top)
            wm = max(wm, max_ms - LATENESS_MS)
    got = pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["eid"])
    ref = reference_matches(cp, rows)
    assert ref, "the stream should match"
    assert got["eid"].is_unique
    want = sorted((m.key[0], pd.Timestamp(m.last_ts), m.measures["n"], tuple(1000 + r for r, _ in m.rows))
                  for m in ref)
    have = sorted((r["k"], r["ts"], r["n"], tuple(r[PROV_IDS])) for r in got.to_dict("records"))
    assert have == want
    assert all(s.value is None for s, _ in saved.values()), "an idle key keeps state past WITHIN"
