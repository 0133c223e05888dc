"""Deterministic source ids (A 5: ids based on the tuple's attributes): the one
definition, in Python (:func:`source_ids`) and as a Spark expression
(:func:`spark_source_id`, which :func:`ananke.ids.source_id_col` uses too).

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
from archive.xxh64 import hash4, hash8, hash_coded

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
    frame's values must already be coerced to their types. Vectorised (archive/xxh64.py);
    :func:`source_ids_reference` is the row-by-row definition it is tested against.
    """
    n = len(frame)
    h = np.full(n, xxhash.xxh64_intdigest(stream.encode("utf-8"), SEED), dtype=np.uint64)
    for name, ctype in columns:
        s = frame[name]
        null = s.isna().to_numpy()
        if null.all():
            continue
        if ctype is ColumnType.TEXT:
            codes, uniques = _factorize_text(s.astype(object).where(~null, ""))
            hashed = hash_coded(codes, [str(u).encode("utf-8") for u in uniques], h)
        elif ctype is ColumnType.BOOLEAN:
            hashed = hash4(s.fillna(False).astype(bool).to_numpy().astype(np.uint32), h)
        elif ctype is ColumnType.DOUBLE:
            # NA -> NaN (masked below); a nullable Float64's NaN *value* must stay NaN, not
            # become 0.0 (to_numpy(na_value=0.0) would fold it, unlike Spark)
            d = s.to_numpy(dtype="float64", na_value=np.nan).copy()
            d[d == 0.0] = 0.0  # fold -0.0 into 0.0, as Spark does
            bits = d.view(np.uint64).copy()
            bits[np.isnan(d)] = np.uint64(0x7FF8000000000000)  # Java's canonical NaN
            hashed = hash8(bits, h)
        elif ctype is ColumnType.TIMESTAMPTZ:
            ts = pd.to_datetime(s, utc=True).astype("datetime64[us, UTC]")
            hashed = hash8(ts.to_numpy(dtype="datetime64[us]", na_value=np.datetime64(0, "us")).view(np.int64)
                           .view(np.uint64), h)
        else:
            hashed = hash8(s.astype("Int64").to_numpy(dtype=np.int64, na_value=0).view(np.uint64), h)
        h = np.where(null, h, hashed)
    return h.view(np.int64)


def _factorize_text(values: pd.Series) -> tuple[np.ndarray, list]:
    """Codes and distinct values of a text column, exactly.

    pandas' factorize hashes an all-string column as C strings, which end at a NUL: it
    gives ``"a\\x00b"`` and ``"a\\x00c"`` (and ``"a"``) one code. The result is therefore
    checked against the column (one vectorised comparison); on a mismatch the values are
    factorized by Python's own hashing, which sees every character.
    """
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    uniques = np.asarray(uniques, dtype=object)
    arr = values.to_numpy(dtype=object)
    if len(arr) and not (uniques[codes] == arr).all():
        index: dict = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in arr), dtype=np.int64, count=len(arr))
        uniques = np.array(list(index), dtype=object)
    return codes.astype(np.int64), list(uniques)


def source_ids_reference(stream: str, frame: pd.DataFrame, columns: Sequence[tuple[str, ColumnType]]) -> np.ndarray:
    """The same ids, one row and one C call at a time: the definition, kept as the oracle."""
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
    """The same id as a Spark column expression: ``xxhash64(stream, *columns)``, with
    ``columns`` the event time first, then the payload, already cast to the archive's
    types. Equal to :func:`source_ids` on the same rows (tests/archive/test_ids.py)."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(stream), *[F.col(c) for c in columns])
