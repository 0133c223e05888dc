"""Deterministic source ids (DESIGN.md §3, A 5: ids based on the tuple's attributes).

``source_id = xxhash64(stream, ts, payload...)`` with Spark's semantics (seed 42, each
column's hash seeding the next, nulls skipped, timestamps as epoch microseconds, doubles
by their IEEE bits with -0.0 folded to 0.0). Spark computes it natively in the sink
adapter (:func:`spark_source_id`); :func:`source_ids` computes the same values in Python
for batches that do not come from Spark, so a row gets one id whichever way it arrives,
and a replayed micro-batch gets the same ids.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xxhash

from archive.types import ColumnType

SEED = 42
_U64 = 1 << 64


def _signed(h: int) -> int:
    return h - _U64 if h >= 1 << 63 else h


def _hash_value(v, ctype: ColumnType, seed: int) -> int:
    if ctype is ColumnType.BIGINT:
        return xxhash.xxh64_intdigest(struct.pack("<q", int(v)), seed)
    if ctype is ColumnType.DOUBLE:
        d = float(v)
        if d == 0.0:
            d = 0.0
        if math.isnan(d):
            bits = 0x7FF8000000000000
            return xxhash.xxh64_intdigest(struct.pack("<Q", bits), seed)
        return xxhash.xxh64_intdigest(struct.pack("<d", d), seed)
    if ctype is ColumnType.TEXT:
        return xxhash.xxh64_intdigest(str(v).encode("utf-8"), seed)
    if ctype is ColumnType.BOOLEAN:
        return xxhash.xxh64_intdigest(struct.pack("<i", 1 if v else 0), seed)
    # timestamps: epoch microseconds
    return xxhash.xxh64_intdigest(struct.pack("<q", int(v)), seed)


def source_ids(stream: str, frame: pd.DataFrame, columns: Sequence[tuple[str, ColumnType]]) -> np.ndarray:
    """Spark-compatible ``xxhash64(stream, *columns)`` of every row, as int64.

    ``columns`` is the event-time column first, then the payload in schema order; the
    frame's values must already be coerced to their types.
    """
    stream_seed = xxhash.xxh64_intdigest(stream.encode("utf-8"), SEED)
    cols = []
    for name, ctype in columns:
        s = frame[name]
        if ctype is ColumnType.TIMESTAMPTZ:
            ts = pd.to_datetime(s, utc=True).astype("datetime64[us, UTC]")
            vals = ts.astype("int64").to_numpy(dtype=object)
            vals[ts.isna().to_numpy()] = None
        else:
            vals = s.astype(object).where(s.notna(), None).to_numpy(dtype=object)
        cols.append((vals, ctype))
    out = np.empty(len(frame), dtype=np.int64)
    for i in range(len(frame)):
        h = stream_seed
        for vals, ctype in cols:
            v = vals[i]
            if v is not None:
                h = _hash_value(v, ctype, h)
        out[i] = _signed(h)
    return out


def spark_source_id(stream: str, columns: Sequence[str]):
    """The same id as a Spark column expression (columns: event time first, then payload,
    already cast to the archive's types)."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(stream), *[F.col(c) for c in columns])
