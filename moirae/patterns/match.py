"""A match, and the key's rows it is computed from (docs/PATTERNS.md).

A :class:`Match` carries the key, its MATCH_NUMBER, the first and last row's event time
and row id, the bound rows (row id and symbol, in order: the match's provenance) and the
MEASURES. :func:`key_rows` cuts a frame into keys and orders each key's rows by
``(event time, row id)``, the one order both matchers use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from moirae.patterns.bound import Bindings
from moirae.patterns.errors import PatternError


@dataclass(frozen=True)
class Match:
    """One match of one pattern in one key."""

    pattern: str
    key: tuple
    match_number: int
    first_ts: object
    last_ts: object
    first_row_id: object
    last_row_id: object
    rows: tuple[tuple[object, str], ...]
    measures: dict[str, object] = field(default_factory=dict, hash=False)

    def rows_by_symbol(self) -> dict[str, list[object]]:
        """The bound row ids of each symbol, in order."""
        out: dict[str, list[object]] = {}
        for rid, sym in self.rows:
            out.setdefault(sym, []).append(rid)
        return out


def ts_ns(s: pd.Series) -> tuple[np.ndarray, str]:
    """An event-time column as int64 nanoseconds, and its kind (``num`` or ``dt:<tz>``)."""
    if s.dtype == np.float64:
        return np.round(s.to_numpy() * 1e9).astype(np.int64), "num"
    if pd.api.types.is_datetime64_any_dtype(s.dtype):
        tz = getattr(s.dtype, "tz", None)
        return pd.DatetimeIndex(s).asi8.astype(np.int64), f"dt:{tz or ''}"
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.round(s.to_numpy(dtype=np.float64) * 1e9).astype(np.int64), "num"
    raise PatternError(f"ORDER BY column {s.name!r} is {s.dtype}, not a time or a number of seconds")


def ts_value(ns: int, kind: str):
    """The event time ``ns`` back in its column's kind (a Timestamp or seconds)."""
    if kind == "num":
        return ns / 1e9
    tz = kind[3:] or None
    return pd.Timestamp(int(ns), tz=tz) if tz else pd.Timestamp(int(ns))


def key_rows(df: pd.DataFrame, partition_by: Sequence[str], order_by: str, row_id: str) -> Iterator[tuple[tuple, pd.DataFrame]]:
    """The rows of each key, ordered by (event time, row id)."""
    if df.empty:
        return
    ordered = df.sort_values([order_by, row_id], kind="stable")
    if not partition_by:
        yield (), ordered
        return
    for key, part in ordered.groupby(list(partition_by), sort=True, dropna=False):
        yield plain_key(key if isinstance(key, tuple) else (key,)), part


def key_positions(df: pd.DataFrame, partition_by: Sequence[str], order_by: str,
                  row_id: str) -> tuple[pd.DataFrame, list[tuple[tuple, np.ndarray]]]:
    """:func:`key_rows` as positions: the rows ordered by (event time, row id), and each
    key (as :func:`key_rows` names it, in its order) with the positions of its rows in that
    order, so a caller converts each column once and slices it per key."""
    ordered = df.sort_values([order_by, row_id], kind="stable")
    if ordered.empty:
        return ordered, []
    if not partition_by:
        return ordered, [((), np.arange(len(ordered)))]
    gb = ordered.groupby(list(partition_by), sort=True, dropna=False)
    codes = gb.ngroup().to_numpy()
    perm = np.argsort(codes, kind="stable")
    parts = np.split(perm, np.flatnonzero(np.diff(codes[perm])) + 1)
    names = [plain_key(k if isinstance(k, tuple) else (k,)) for k in gb.size().index]
    return ordered, list(zip(names, parts, strict=True))


def plain_key(values) -> tuple:
    """A key as a tuple of plain Python values."""
    return tuple(v.item() if isinstance(v, np.generic) else v for v in values)


def make_match(pattern: str, key: tuple, number: int, first: int, last: int, bound: Bindings,
               symbols: Sequence[str], ts: np.ndarray, rid: np.ndarray, base: int, kind: str,
               measures: dict[str, object]) -> Match:
    """A :class:`Match` of rows ``first``..``last`` (positions in the key's stream)."""
    def r(seq: int):
        v = rid[seq - base]
        return v.item() if isinstance(v, np.generic) else v

    return Match(pattern, key, number, ts_value(int(ts[first - base]), kind), ts_value(int(ts[last - base]), kind),
                 r(first), r(last), tuple((r(seq), symbols[s]) for seq, s in bound), measures)


def to_frame(matches: Sequence[Match], partition_by: Sequence[str], measure_names: Sequence[str]) -> pd.DataFrame:
    """Matches as rows: pattern, the keys, match_number, first_ts, last_ts, first/last_row_id,
    row_ids, symbols (lists, in order) and one column per measure."""
    cols = ["pattern", *partition_by, "match_number", "first_ts", "last_ts", "first_row_id", "last_row_id",
            "row_ids", "symbols", *measure_names]
    rows = [[m.pattern, *m.key, m.match_number, m.first_ts, m.last_ts, m.first_row_id, m.last_row_id,
             [r for r, _ in m.rows], [s for _, s in m.rows], *(m.measures.get(n) for n in measure_names)]
            for m in matches]
    return pd.DataFrame(rows, columns=cols)


def resume(skip: str, target: str | None, first: int, last: int, bound: Bindings, symbols) -> int:
    """Where the next match may start after a match of rows ``first``..``last`` (AFTER MATCH SKIP).

    TO FIRST/LAST of a symbol the match did not bind, or of its first row, resumes at the next row.
    """
    if skip == "PAST LAST ROW":
        return last + 1
    rows = [seq for seq, s in bound if symbols[s] == target]
    if skip == "TO NEXT ROW" or not rows:
        return first + 1
    pick = rows[0] if skip == "TO FIRST" else rows[-1]
    return pick if pick > first else first + 1


__all__ = ["Match", "key_rows", "make_match", "plain_key", "resume", "to_frame", "ts_ns", "ts_value"]
