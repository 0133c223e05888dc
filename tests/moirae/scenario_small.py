"""A small fixed scenario for end-to-end tests: three servers' bandwidth, history in
bulk plus a live part in CSV files, and the bandwidth-overload event-query (M fig. 1)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

SCHEMA = "ts timestamp, sid string, bw double"
THRESHOLD = 80.0
WINDOW = "5 minutes"


def history(n: int = 1440, seed: int = 1) -> pd.DataFrame:
    """Four hours of 10-second readings from three servers, with planted overloads."""
    ts = pd.date_range("2024-03-01", periods=n, freq="10s", tz="UTC")
    rng = np.random.default_rng(seed)
    bw = rng.normal(50, 8, n)
    sid = np.array([f"s{i % 3}" for i in range(n)])
    hot = (ts.hour == 1) & (sid == "s1") | (ts.hour == 3) & (ts.minute < 10) & (sid == "s2")
    bw[hot] += 45
    return pd.DataFrame({"ts": ts, "sid": sid, "bw": bw})


def live(parts: int = 4, per_part: int = 60) -> list[pd.DataFrame]:
    """Live readings after the history; s0 overloads in the second part."""
    ts = pd.date_range("2024-03-01 04:00", periods=parts * per_part, freq="10s", tz="UTC")
    sid = np.array([f"s{i % 3}" for i in range(len(ts))])
    bw = np.full(len(ts), 50.0) + np.arange(len(ts)) % 7
    bw[(sid == "s0") & (np.arange(len(ts)) // per_part == 1)] = 97.0
    df = pd.DataFrame({"ts": ts, "sid": sid, "bw": bw})
    return [df.iloc[i * per_part:(i + 1) * per_part] for i in range(parts)]


def overload(metrics):
    """M fig. 1: a server's 5-minute average bandwidth above the threshold."""
    w = metrics.window(WINDOW, keys=["sid"], aggs=[F.avg("bw").alias("avg_bw")], ts_out="ts")
    return (w.filter(F.col("avg_bw") > THRESHOLD)
             .with_column("eid", F.concat_ws(":", F.lit("ov"), F.col("sid"), F.date_format("ts", "yyyyMMddHHmmss"))))


def expected_events(frame: pd.DataFrame) -> set[str]:
    """The same event-query computed by hand with pandas."""
    f = frame.copy()
    f["win"] = f["ts"].dt.floor("5min")
    g = f.groupby(["sid", "win"])["bw"].mean().reset_index()
    g = g[g["bw"] > THRESHOLD]
    end = g["win"] + pd.Timedelta(minutes=5) - pd.Timedelta(microseconds=1)
    return {f"ov:{s}:{t.strftime('%Y%m%d%H%M%S')}" for s, t in zip(g["sid"], end, strict=True)}


def users_history(metrics: pd.DataFrame) -> pd.DataFrame:
    """Logged-in users per server, one snapshot per minute: while a server is overloaded
    its planted cause is logged in ('backup' on s0 and s1, 'miner' on s2), 'alice' is on
    everywhere, 'bob' on s0 only."""
    minutes = pd.date_range(metrics["ts"].min().floor("min"), metrics["ts"].max(), freq="1min", tz="UTC")
    hot = metrics.assign(m=metrics["ts"].dt.floor("min")).groupby(["sid", "m"])["bw"].max() > 80
    rows = []
    for t in minutes:
        for sid in ("s0", "s1", "s2"):
            rows.append((t, sid, "alice"))
            if sid == "s0":
                rows.append((t, sid, "bob"))
            if hot.get((sid, t), False):
                rows.append((t, sid, "miner" if sid == "s2" else "backup"))
    return pd.DataFrame(rows, columns=["ts", "sid", "user"])


def users_context(events, users):
    """M fig. 3: the users logged in on the event's server in the 5 minutes before it."""
    e, u = events.alias("e"), users.alias("u")
    cond = ((F.col("e.sid") == F.col("u.sid")) & (F.col("u.ts") <= F.col("e.ts"))
            & (F.col("u.ts") > F.col("e.ts") - F.expr("INTERVAL 5 MINUTES")))
    return e.join(u, cond).select(F.col("e.eid").alias("eid"), F.col("e.ts").alias("ts"), "u.user").distinct()


def wait(cond, timeout: float = 240, what: str = "condition") -> None:
    """Poll ``cond`` until it holds, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
