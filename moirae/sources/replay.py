"""Replay a CSV or Parquet file as a reproducible out-of-order stream (DEBS'19 §2).

:func:`replay_file` reads the file, parses its event-time column, hands rows whose event
time cannot be parsed back separately (with the reason, for the caller to dead-letter:
they are never dropped silently, docs/ARCHITECTURE.md, "Invariants"), and orders the rest by their ingestion
time per :mod:`moirae.sources.disorder`. The event time column comes out as
``datetime64[ns, UTC]``; two columns are added: ``ingest_ts`` (when to deliver the row)
and ``delay_ms`` (ingestion - event time).

>>> import pandas as pd
>>> df = pd.DataFrame({"ts": [0, 1000, 2000, "x"], "v": [1, 2, 3, 4]})
>>> r = replay_frame(df, ReplayConfig(ts_col="ts", unit="ms"))
>>> list(r.rows["v"]), list(r.rejected["reason"])
([1, 2, 3], ["cannot parse 'x' as a number of ms"])
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from moirae.sources.analyze import StreamStats, analyze
from moirae.sources.disorder import NS_PER_MS, ReplayConfig, disorder
from moirae.sources.errors import (
    InvalidReplayOption,
    MissingColumn,
    NonTemporalColumn,
    SourceFileNotFound,
    UnsupportedFormat,
)

INGEST_COL = "ingest_ts"
DELAY_COL = "delay_ms"
ROW_COL = "row"
REASON_COL = "reason"
_UNIT_NS = {"s": 1_000_000_000, "ms": NS_PER_MS, "us": 1_000, "ns": 1}
_INT64_MAX = float(np.iinfo("int64").max)


@dataclass(frozen=True)
class Replay:
    """A replayed stream: ``rows`` in delivery order, ``rejected`` rows with a reason.

    ``rejected`` holds the rows as read (values as strings), the 0-based ``row`` position
    in the file (``-1`` for a CSV line that could not be split into fields) and ``reason``.
    """

    rows: pd.DataFrame
    rejected: pd.DataFrame
    config: ReplayConfig
    source: str

    def stats(self) -> StreamStats:
        """Out-of-order statistics of the delivered stream (DEBS'19 §2.4)."""
        return analyze(event_ns(self.rows[self.config.ts_col]))

    def to_csv_bytes(self) -> bytes:
        """The delivered stream as CSV bytes: identical for identical file and config."""
        buf = io.StringIO()
        self.rows.to_csv(buf, index=False, lineterminator="\n")
        return buf.getvalue().encode("utf-8")

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the delivered stream as CSV (``.csv``) or Parquet (``.parquet``)."""
        target = str(path)
        if target.endswith((".parquet", ".pq")):
            self.rows.to_parquet(target, index=False)
        else:
            with open(target, "wb") as fh:
                fh.write(self.to_csv_bytes())


def event_ns(column: pd.Series) -> np.ndarray:
    """Nanoseconds since the epoch of a ``datetime64[ns, UTC]`` column."""
    return column.to_numpy(dtype="datetime64[ns]").view("int64") if len(column) else np.zeros(0, "int64")


def file_format(path: str) -> str:
    """``csv`` or ``parquet`` from the file name; anything else is UnsupportedFormat."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
        return "csv"
    raise UnsupportedFormat(f"{path}: cannot replay this file type (expected .csv, .tsv or .parquet)")


def read_table(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[str]]:
    """Read a CSV or Parquet file; returns the frame and the CSV lines that could not be split."""
    path = str(path)
    if not os.path.isfile(path):
        raise SourceFileNotFound(f"no such file to replay: {path}")
    if file_format(path) == "parquet":
        return pd.read_parquet(path), []
    sep = "\t" if path.lower().endswith(".tsv") else ","
    try:
        return pd.read_csv(path, sep=sep), []
    except pd.errors.EmptyDataError:
        return pd.DataFrame(), []
    except pd.errors.ParserError:
        # Find the lines with more fields than the header, then read around them.
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            records = list(csv.reader(fh, delimiter=sep))
        width = len(records[0]) if records else 0
        skip = [i for i, rec in enumerate(records) if i > 0 and len(rec) > width]
        bad = [f"line {i + 1}: {sep.join(records[i])}" for i in skip]
        return pd.read_csv(path, sep=sep, skiprows=skip), bad


def parse_event_time(column: pd.Series, name: str, unit: str | None) -> tuple[np.ndarray, pd.Series]:
    """Parse an event-time column into int64 ns since the epoch (UTC).

    Returns ``(ns, reasons)``: ``reasons`` is ``None`` where the value parsed and the
    reason otherwise. A column in which no value parses is a NonTemporalColumn.
    """
    n = len(column)
    reasons = pd.Series([None] * n, index=column.index, dtype="object")
    if pd.api.types.is_bool_dtype(column):
        raise NonTemporalColumn(f"column {name!r} holds booleans, not times")
    if isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(column):
        if unit is not None:
            raise InvalidReplayOption(f"column {name!r} is already a timestamp; do not give a unit ({unit!r})")
        ts = column.dt.tz_localize("UTC") if column.dt.tz is None else column.dt.tz_convert("UTC")
        ts = ts.astype("datetime64[ns, UTC]")
        missing = ts.isna().to_numpy()
        reasons[missing] = "missing event time"
        ns = ts.to_numpy(dtype="datetime64[ns]").view("int64").copy()
        ns[missing] = 0
        return ns, reasons
    if pd.api.types.is_numeric_dtype(column) or unit is not None:
        if unit is None:
            raise NonTemporalColumn(
                f"column {name!r} is numeric ({column.dtype}); give its time unit (s, ms, us or ns)")
        values = pd.to_numeric(column, errors="coerce").astype("float64")
        raw_bad = values.isna() & column.notna()
        scaled = values.to_numpy() * _UNIT_NS[unit]
        out_of_range = np.isfinite(scaled) & (np.abs(scaled) >= _INT64_MAX)
        for i in np.flatnonzero(raw_bad.to_numpy()):
            reasons.iat[i] = f"cannot parse {column.iat[i]!r} as a number of {unit}"
        reasons[(column.isna()).to_numpy()] = "missing event time"
        for i in np.flatnonzero(out_of_range | (~np.isfinite(scaled) & ~values.isna().to_numpy())):
            reasons.iat[i] = f"event time {column.iat[i]!r} {unit} is out of range"
        ok = reasons.isna().to_numpy()
        ns = np.zeros(n, dtype="int64")
        if pd.api.types.is_integer_dtype(column):
            ns[ok] = column.to_numpy()[ok].astype("int64") * _UNIT_NS[unit]
        else:
            ns[ok] = np.rint(scaled[ok]).astype("int64")
    else:
        text = column.astype("string")
        ts = pd.to_datetime(text, utc=True, errors="coerce", format="ISO8601")
        retry = ts.isna() & text.notna()
        if retry.any():
            ts[retry] = pd.to_datetime(text[retry], utc=True, errors="coerce", format="mixed")
        ts = ts.astype("datetime64[ns, UTC]")
        for i in np.flatnonzero((ts.isna() & text.notna()).to_numpy()):
            reasons.iat[i] = f"cannot parse {column.iat[i]!r} as a timestamp"
        reasons[text.isna().to_numpy()] = "missing event time"
        ok = reasons.isna().to_numpy()
        ns = np.zeros(n, dtype="int64")
        ns[ok] = ts.to_numpy(dtype="datetime64[ns]").view("int64")[ok]
    if not reasons.notna().any():
        return ns, reasons
    if reasons.notna().all() and column.notna().any():
        sample = column[column.notna()].iat[0]
        raise NonTemporalColumn(f"column {name!r} holds no parseable event time (e.g. {sample!r})")
    return ns, reasons


def replay_frame(df: pd.DataFrame, config: ReplayConfig, source: str = "<frame>") -> Replay:
    """Disorder an in-memory frame per ``config`` (see the module docstring)."""
    name = config.ts_col
    if name not in df.columns:
        raise MissingColumn(f"{source}: no event-time column {name!r} (columns: {', '.join(map(str, df.columns))})")
    for added in (INGEST_COL, DELAY_COL):
        if added in df.columns:
            raise InvalidReplayOption(f"{source}: column {added!r} is reserved for the replay output")
    df = df.reset_index(drop=True)
    ns, reasons = parse_event_time(df[name], name, config.unit)
    bad = reasons.notna().to_numpy()
    rejected = df[bad].astype("string").astype("object")
    rejected.insert(0, ROW_COL, np.flatnonzero(bad).astype("int64"))
    rejected[REASON_COL] = reasons[bad].to_numpy()
    good = df[~bad].reset_index(drop=True)
    good_ns = ns[~bad]
    d = disorder(good_ns, config)
    rows = good.iloc[d.order].reset_index(drop=True)
    rows[name] = pd.to_datetime(good_ns[d.order], unit="ns", utc=True)
    rows[INGEST_COL] = pd.to_datetime(d.ingest_ns[d.order], unit="ns", utc=True)
    rows[DELAY_COL] = d.delay_ns[d.order].astype("float64") / NS_PER_MS
    return Replay(rows=rows, rejected=rejected.reset_index(drop=True), config=config, source=source)


def replay_file(path: str | os.PathLike[str], config: ReplayConfig) -> Replay:
    """Read ``path`` (CSV or Parquet) and replay it per ``config``.

    Raises SourceFileNotFound, UnsupportedFormat, MissingColumn or NonTemporalColumn;
    rows with an unparseable event time (or CSV lines with too many fields) come back in
    ``Replay.rejected`` with a reason.
    """
    df, bad_lines = read_table(path)
    replay = replay_frame(df, config, source=str(path))
    if not bad_lines:
        return replay
    extra = pd.DataFrame({ROW_COL: [-1] * len(bad_lines),
                          REASON_COL: [f"malformed CSV {line!r}: more fields than the header" for line in bad_lines]})
    rejected = pd.concat([replay.rejected, extra], ignore_index=True)
    return Replay(rows=replay.rows, rejected=rejected, config=config, source=replay.source)


def analyze_file(path: str | os.PathLike[str], ts_col: str, unit: str | None = None) -> StreamStats:
    """Out-of-order statistics of a file in its own order (DEBS'19 §2.4, the analysis tool)."""
    df, _ = read_table(path)
    if ts_col not in df.columns:
        raise MissingColumn(f"{path}: no event-time column {ts_col!r} (columns: {', '.join(map(str, df.columns))})")
    ns, reasons = parse_event_time(df[ts_col], ts_col, unit)
    return analyze(ns[reasons.isna().to_numpy()])
