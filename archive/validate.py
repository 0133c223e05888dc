"""Splitting an incoming batch into archivable rows and dead letters.

A row is a dead letter when it has no event time, an unparseable one, or a value that
does not fit its column's type; a batch whose columns do not match the stream's schema
dead-letters every row, naming the columns. The reason always names the column and value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from archive.types import ColumnType, coerce


@dataclass(frozen=True)
class DeadLetter:
    row: dict
    reason: str


def _jsonable(row: dict) -> dict:
    return json.loads(pd.Series(row, dtype=object).to_json(date_format="iso", default_handler=str))


def split_batch(frame: pd.DataFrame, ts_col: str, schema: dict[str, ColumnType],
                stream: str) -> tuple[pd.DataFrame, list[DeadLetter]]:
    """Coerce ``frame`` to the stream's schema. Returns the good rows (event time in
    ``ts_col`` as UTC microseconds, payload coerced, plus ``_sid`` if the frame had one)
    and the dead letters."""
    expected = [ts_col, *schema]
    have = [c for c in frame.columns if c != "_sid"]
    missing = [c for c in expected if c not in have]
    extra = [c for c in have if c not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if extra:
            parts.append(f"unexpected column(s) {extra}")
        reason = f"batch does not match the schema of stream {stream!r}: " + "; ".join(parts)
        return _empty(ts_col, schema), [DeadLetter(_jsonable(r), reason) for r in frame.to_dict("records")]

    bad = np.zeros(len(frame), dtype=bool)
    reasons = np.full(len(frame), None, dtype=object)
    out = pd.DataFrame(index=frame.index)

    ts, ts_bad = coerce(frame[ts_col], ColumnType.TIMESTAMPTZ)
    no_ts = ts.isna().to_numpy() & ~ts_bad
    for mask, fmt in ((no_ts, "no event time in column {col!r}"),
                      (ts_bad, "unparseable event time {val!r} in column {col!r}")):
        new = mask & ~bad
        for i in np.flatnonzero(new):
            reasons[i] = fmt.format(col=ts_col, val=frame[ts_col].iloc[i])
        bad |= mask
    out[ts_col] = ts
    for col, ctype in schema.items():
        values, col_bad = coerce(frame[col], ctype)
        new = col_bad & ~bad
        for i in np.flatnonzero(new):
            reasons[i] = f"value {frame[col].iloc[i]!r} in column {col!r} is not {ctype.value}"
        bad |= col_bad
        out[col] = values
    if "_sid" in frame.columns:
        out["_sid"] = frame["_sid"].to_numpy()
    dead = [DeadLetter(_jsonable(frame.iloc[i].to_dict()), reasons[i]) for i in np.flatnonzero(bad)]
    return out[~bad].reset_index(drop=True), dead


def _empty(ts_col: str, schema: dict[str, ColumnType]) -> pd.DataFrame:
    """No good rows, but the stream's columns and types (the write path reads them)."""
    out = pd.DataFrame({ts_col: coerce(pd.Series([], dtype=object), ColumnType.TIMESTAMPTZ)[0]})
    for col, ctype in schema.items():
        out[col] = coerce(pd.Series([], dtype=object), ctype)[0]
    return out
