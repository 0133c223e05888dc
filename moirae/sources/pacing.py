"""Pacing a stream by ingestion time, and pandas-to-Spark schema mapping.

:class:`Pacer` decides how many rows of a stream sorted by ingestion time may be
delivered by now: a row is due once the wall clock elapsed since the pacer was anchored,
times the speed-up factor, has reached its ingestion time minus the anchor row's. With
``speedup="max"`` everything is due at once. Offsets are row positions, so a restarted
query re-anchors at its checkpointed position and resumes exactly there.

>>> import numpy as np
>>> from scheduler.clock import ManualClock
>>> clock = ManualClock(100.0)
>>> p = Pacer(np.array([0, 1, 2, 3]) * 1_000_000_000, speedup=2.0, clock=clock)
>>> p.due(0)
1
>>> clock.advance(1.0)
>>> p.due(0)
3
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scheduler.clock import Clock


@dataclass
class Pacer:
    """Rows due by now, given ingestion times (ns, non-decreasing) and a speed-up factor."""

    ingest_ns: np.ndarray
    speedup: float | str
    clock: Clock
    _anchor: tuple[int, float] | None = field(default=None, init=False)

    def due(self, start: int, max_rows: int | None = None) -> int:
        """The end position (exclusive) of the rows due, never below ``start``."""
        n = len(self.ingest_ns)
        if start >= n:
            return n
        if self.speedup == "max":
            end = n
        else:
            now = self.clock.now()
            if self._anchor is None or self._anchor[0] > start:
                self._anchor = (start, now)
            pos, wall = self._anchor
            horizon = self.ingest_ns[pos] + (now - wall) * float(self.speedup) * 1e9
            end = int(np.searchsorted(self.ingest_ns, horizon, side="right"))
        if max_rows is not None:
            end = min(end, start + max_rows)
        return max(end, start)


def spark_schema(df: pd.DataFrame):
    """A Spark ``StructType`` for a pandas frame (timestamps become UTC timestamps)."""
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = []
    for name, dtype in df.dtypes.items():
        if pd.api.types.is_bool_dtype(dtype):
            t = BooleanType()
        elif pd.api.types.is_integer_dtype(dtype):
            t = LongType()
        elif pd.api.types.is_float_dtype(dtype):
            t = DoubleType()
        elif pd.api.types.is_datetime64_any_dtype(dtype):
            t = TimestampType()
        else:
            t = StringType()
        fields.append(StructField(str(name), t, True))
    return StructType(fields)


def to_arrow_batch(df: pd.DataFrame, schema):
    """A pyarrow RecordBatch of ``df`` matching the Spark ``schema`` (µs UTC timestamps)."""
    import pyarrow as pa

    arrays, names = [], []
    for f in schema.fields:
        col = df[f.name]
        kind = f.dataType.typeName()
        if kind == "timestamp":
            arr = pa.array(col.dt.tz_convert("UTC") if col.dt.tz is not None else col.dt.tz_localize("UTC"),
                           type=pa.timestamp("ns", tz="UTC")).cast(pa.timestamp("us", tz="UTC"), safe=False)
        elif kind == "long":
            arr = pa.array(col, type=pa.int64(), from_pandas=True)
        elif kind == "double":
            arr = pa.array(col, type=pa.float64(), from_pandas=True)
        elif kind == "boolean":
            arr = pa.array(col, type=pa.bool_(), from_pandas=True)
        else:
            arr = pa.array(col.astype("string").astype("object"), type=pa.string(), from_pandas=True)
        arrays.append(arr)
        names.append(f.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)
