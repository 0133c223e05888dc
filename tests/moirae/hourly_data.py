"""A generated data set shaped like a year of hourly monitoring, in small: an hourly
stream of three keys with planted runs of consecutive alerting hours, and a sparse side
stream (one row per key every few hours) that only a SQL context-query reads.

The planted runs: key ``k1`` is hot from 18:00 to 00:00 (seven consecutive hourly
windows) on the days of :data:`K1_RUNS`, with ``cond=heat`` in the side stream around
them; key ``k2`` is hot from 03:00 to 05:00 on :data:`K2_RUNS`, with ``cond=frost``.
Everything else is ``calm`` and well under the threshold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

START = pd.Timestamp("2024-01-01", tz="UTC")
KEYS = ("k0", "k1", "k2")
THRESHOLD = 80.0
K1_RUNS = (5, 12, 19, 26, 33, 40)  # days whose 18:00-00:00 are hot for k1 (7 windows each)
K2_RUNS = (9, 23)  # days whose 03:00-05:00 are hot for k2 (3 windows each)
SIDE_EVERY_H = 3

NORM_SQL = ("SELECT h.key, avg(h.value) AS mean_value, stddev(h.value) AS sd_value, count(*) AS n "
            "FROM load h WHERE h.key = :key GROUP BY h.key")
CONTEXT_SQL = ("SELECT DISTINCT e.eid, e.ts, w.cond FROM events e JOIN weather w "
               "ON w.key = e.key AND w.ts <= e.ts AND w.ts > e.ts - interval '6 hours'")


def _hot(key: str, ts: pd.DatetimeIndex) -> np.ndarray:
    day = np.asarray((ts - START).days)
    hour = np.asarray(ts.hour)
    if key == "k1":  # 18:00 .. 23:00 of a run day, and 00:00 of the day after
        return (np.isin(day, K1_RUNS) & (hour >= 18)) | (np.isin(day - 1, K1_RUNS) & (hour == 0))
    if key == "k2":
        return np.isin(day, K2_RUNS) & (hour >= 3) & (hour <= 5)
    return np.zeros(len(ts), dtype=bool)


def load_rows(days: int, seed: int = 3) -> pd.DataFrame:
    """The hourly stream: ``ts``, ``key``, ``value`` (one row per key and hour)."""
    rng = np.random.default_rng(seed)
    ts = pd.date_range(START, periods=days * 24, freq="1h")
    parts = []
    for key in KEYS:
        value = 40 + 8 * np.sin(np.arange(len(ts)) * 2 * np.pi / 24) + rng.normal(0, 3, len(ts))
        value[_hot(key, ts)] = 95 + rng.normal(0, 2, int(_hot(key, ts).sum()))
        parts.append(pd.DataFrame({"ts": ts, "key": key, "value": value.round(3)}))
    return pd.concat(parts).sort_values(["ts", "key"], kind="stable").reset_index(drop=True)


def side_rows(days: int) -> pd.DataFrame:
    """The sparse side stream: ``ts``, ``key``, ``cond``, one row per key every
    :data:`SIDE_EVERY_H` hours; ``cond`` names the planted cause around a key's runs."""
    ts = pd.date_range(START, periods=days * 24 // SIDE_EVERY_H, freq=f"{SIDE_EVERY_H}h")
    parts = []
    for key in KEYS:
        near = np.zeros(len(ts), dtype=bool)
        for shift in range(SIDE_EVERY_H + 6):  # a side row counts as near a run if a hot hour follows within 9 h
            near |= _hot(key, ts + pd.Timedelta(hours=shift))
        cond = np.where(near, "heat" if key == "k1" else "frost", "calm")
        parts.append(pd.DataFrame({"ts": ts, "key": key, "cond": cond}))
    return pd.concat(parts).sort_values(["ts", "key"], kind="stable").reset_index(drop=True)


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    frame.assign(ts=frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(path, index=False)
    return path


def expected_alerts(load: pd.DataFrame) -> pd.DataFrame:
    """The event-query by hand: per key and hour, the windows whose average exceeds the
    threshold (one row per hour, so the average is the row), with their eids; the last
    hour's window never closes (no later row moves the watermark past it)."""
    last = load["ts"].max()
    hot = load[(load["value"] > THRESHOLD) & (load["ts"] < last)].copy()
    end = hot["ts"] + pd.Timedelta(hours=1) - pd.Timedelta(microseconds=1)
    hot["eid"] = hot["key"] + ":" + end.dt.strftime("%Y%m%d%H")
    hot["end"] = end
    return hot


def hot_hours(load):
    """The event-query: a key's average over a one-hour window above the threshold."""
    w = load.window("1 hour", keys=["key"], aggs=[F.avg("value").alias("avg_value")], ts_out="ts")
    return (w.filter(F.col("avg_value") > THRESHOLD)
             .with_column("eid", F.concat_ws(":", F.col("key"), F.date_format("ts", "yyyyMMddHH"))))
