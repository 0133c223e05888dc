"""The pattern operators' stateful processors driven as Spark drives them, without a JVM
(tests/patterns/test_spark_processor.py, test_spark_set.py): per micro-batch, each key's
new rows, then the key's event-time timers the watermark passed; the processor is rebuilt
from its saved state between batches (a restart), and no-data batches follow the input's
end. Stand-ins for Spark's state handle, state value and timer values, and a seeded stream
arriving out of order within :data:`LATENESS_MS`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from moirae.patterns.spark_processor import IN_IDS, IN_TS
from moirae.patterns.spark_schema import ROW_ID

T0 = pd.Timestamp("2024-01-01", tz="UTC")
LATENESS_MS = 30_000


class State:
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


class Handle:
    def __init__(self, state: State, timers: set) -> None:
        self.state, self.timers = state, timers

    def getValueState(self, name, schema):  # noqa: N802 - pyspark's name
        return self.state

    def listTimers(self):  # noqa: N802
        return iter(sorted(self.timers))

    def deleteTimer(self, t) -> None:  # noqa: N802
        self.timers.discard(t)

    def registerTimer(self, t) -> None:  # noqa: N802
        self.timers.add(t)


class Timer:
    def __init__(self, wm: int) -> None:
        self.wm = wm

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802
        return self.wm


def seeded_stream(seed: int) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
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


def drive(make: Callable[[], object], rows: pd.DataFrame, batches: list[pd.DataFrame],
          check_late: bool = False) -> tuple[pd.DataFrame, dict]:
    """Every batch of ``batches`` (then the input's end) through fresh processors from
    ``make()`` whose state comes only from the saved store; the processors' output and
    that store (per key: its state value and timers). ``check_late``: assert that no
    row arrives at or below the watermark."""
    saved: dict[str, tuple[State, set]] = {}  # per key: what Spark's state store keeps
    out: list[pd.DataFrame] = []
    wm, max_ms = -1, None
    end = [pd.DataFrame(columns=rows.columns)] * 3  # no-data batches once the input has ended
    for i, batch in enumerate([*batches, rows.iloc[:0], *end]):
        if i == len(batches):  # the input ended: the watermark passes everything
            wm = int(rows["ts"].max().value // 1_000_000) + 60_000
        if check_late:
            assert not len(batch) or (batch["ts"].astype("int64") // 1_000_000 > wm).all(), "a late row"
        procs = {}
        for key in {*saved, *batch["k"]}:  # a new processor per batch: state only from the store
            state, timers = saved.setdefault(key, (State(), set()))
            p = make()
            p.init(Handle(state, timers))
            procs[key] = p
        for key, part in batch.groupby("k"):
            out += list(procs[key].handleInputRows((key,), iter([part]), Timer(wm)))
        for key, p in procs.items():
            due = sorted(t for t in saved[key][1] if t <= wm)
            if due:
                saved[key][1].difference_update(due)
                out += list(p.handleExpiredTimer((key,), Timer(wm), None))
        if len(batch):
            top = int(batch["ts"].max().value // 1_000_000)
            max_ms = top if max_ms is None else max(max_ms, top)
            wm = max(wm, max_ms - LATENESS_MS)
    out = [o for o in out if len(o)]
    return (pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["eid"])), saved
