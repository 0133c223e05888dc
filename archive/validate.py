"""Splitting an incoming batch into archivable rows and dead letters.

A row is a dead letter when it has no event time, an unparseable one, a value that does
not fit its column's type, or text PostgreSQL cannot hold (a NUL character, or an
unpaired surrogate, which has no UTF-8 encoding); a batch whose columns do not match the
stream's schema dead-letters every row, naming the columns. The reason always names the
column and value.

>>> text_problem("ok"), text_problem("a\\x00b")
(None, 'contains a NUL character at position 1, which PostgreSQL text cannot hold')
>>> text_problem("x\\ud800")
'contains an unpaired surrogate U+D800 at position 1, which has no UTF-8 encoding'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from archive.types import ColumnType, coerce

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Longest text value archived (characters). PostgreSQL's own limit is 1 GB per value; a
#: monitored value this long is a malformed row (a runaway log line, a binary blob), and
#: would bloat every chunk read by Recall.
MAX_TEXT_CHARS = 1_000_000


def text_problem(value: str) -> str | None:
    """Why PostgreSQL ``text`` cannot hold ``value``, or None when it can: a NUL
    character (PostgreSQL text cannot contain one), or an unpaired surrogate (no UTF-8
    encoding exists for it, and the database's encoding is UTF-8)."""
    i = value.find("\x00")
    if i >= 0:
        return f"contains a NUL character at position {i}, which PostgreSQL text cannot hold"
    m = _SURROGATE.search(value)
    if m is not None:
        return f"contains an unpaired surrogate U+{ord(m.group()):04X} at position {m.start()}, which has no UTF-8 encoding"
    if len(value) > MAX_TEXT_CHARS:
        return f"is {len(value):,} characters long, more than the {MAX_TEXT_CHARS:,} a text value may hold"
    return None


def text_problems(values: pd.Series) -> np.ndarray:
    """:func:`text_problem` of every string in ``values`` (others: None), as an object
    array. A column of strings none of which has a NUL, a surrogate or too many
    characters (the usual case) is checked in one joined string, with no Python call per
    row; otherwise each suspect string is looked at."""
    out = np.full(len(values), None, dtype=object)
    if not len(values):
        return out
    arr = values.to_numpy(dtype=object)
    try:
        joined = "\x01".join(arr)  # C speed; any value not a str raises
    except TypeError:
        joined = None
    if joined is not None:
        if "\x00" not in joined and (joined.isascii() or _SURROGATE.search(joined) is None) and (
                len(joined) <= MAX_TEXT_CHARS or max(map(len, arr)) <= MAX_TEXT_CHARS):
            return out
        suspect = np.flatnonzero(["\x00" in v or len(v) > MAX_TEXT_CHARS or _SURROGATE.search(v) is not None
                                  for v in arr])
    else:
        suspect = [i for i, v in enumerate(arr) if isinstance(v, str) and text_problem(v) is not None]
    for i in suspect:
        out[i] = text_problem(arr[i])
    return out


@dataclass(frozen=True)
class DeadLetter:
    row: dict
    reason: str


def insert_dead_letters(cur, stream: str, batch_id: int | None, dead: list[DeadLetter]) -> None:
    """Record ``dead`` rows of ``stream``'s batch ``batch_id`` with their reasons, in the
    caller's transaction (the one writing the batch's good rows)."""
    from psycopg2.extras import execute_values

    execute_values(cur, "INSERT INTO moirae_dead_letters (stream, batch_id, row_data, reason) VALUES %s",
                   [(stream, batch_id, json.dumps(d.row), d.reason) for d in dead])


def storable(value: str) -> str:
    """``value`` with what PostgreSQL cannot hold spelled as escapes (a NUL as the six
    characters ``\\u0000``, an unpaired surrogate as ``\\udXXX``), so a dead letter keeps
    the row as it came, readably.

    >>> storable("a\\x00b") == "a\\\\u0000b", storable("ok")
    (True, 'ok')
    """
    if text_problem(value) is None:
        return value
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value.replace("\x00", "\\u0000"))


def storable_json(obj):
    """``obj`` (JSON-like: dicts, lists, scalars) with every string, keys included, made
    :func:`storable` (PostgreSQL's jsonb cannot hold a NUL either).

    >>> storable_json({"user": ["ok", "a\\x00"]}) == {"user": ["ok", "a\\\\u0000"]}
    True
    """
    if isinstance(obj, str):
        return storable(obj)
    if isinstance(obj, dict):
        return {storable_json(k): storable_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [storable_json(v) for v in obj]
    return obj


def storable_rows(frame: pd.DataFrame) -> np.ndarray:
    """Which rows of ``frame`` PostgreSQL text can hold (no string value with a NUL or an
    unpaired surrogate in any object column), as a boolean array."""
    ok = np.ones(len(frame), dtype=bool)
    for col in frame.columns:
        if frame[col].dtype == object or pd.api.types.is_string_dtype(frame[col]):
            ok &= pd.isna(text_problems(frame[col]))
    return ok


def _jsonable(row: dict) -> dict:
    safe = {storable(k) if isinstance(k, str) else k: storable(v) if isinstance(v, str) else v
            for k, v in row.items()}
    return json.loads(pd.Series(safe, dtype=object).to_json(date_format="iso", default_handler=str))


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
        if ctype is ColumnType.TEXT:
            why = text_problems(values)
            for i in np.flatnonzero(pd.notna(why) & ~bad):
                reasons[i] = f"value {_short(values.iloc[i])} in column {col!r} {why[i]}"
            bad |= pd.notna(why)
        out[col] = values
    if "_sid" in frame.columns:
        out["_sid"] = frame["_sid"].to_numpy()
    dead = [DeadLetter(_jsonable(frame.iloc[i].to_dict()), reasons[i]) for i in np.flatnonzero(bad)]
    return out[~bad].reset_index(drop=True), dead


def _short(value) -> str:
    """``repr(value)``, cut to 80 characters (a reason names the value, it does not copy a megabyte)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _empty(ts_col: str, schema: dict[str, ColumnType]) -> pd.DataFrame:
    """No good rows, but the stream's columns and types (the write path reads them)."""
    out = pd.DataFrame({ts_col: coerce(pd.Series([], dtype=object), ColumnType.TIMESTAMPTZ)[0]})
    for col, ctype in schema.items():
        out[col] = coerce(pd.Series([], dtype=object), ctype)[0]
    return out
