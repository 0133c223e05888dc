"""A live monitor of this machine as a Spark 4 Python Data Source: format ``moirae_host``.

It samples real metrics with psutil and emits them with the same columns as the
cluster scenario (M §1's computer-system monitoring), with ``sid`` = the host name:

- ``metrics`` (ts, sid, cpu, mem, bw): CPU and memory in percent, ``bw`` the network
  traffic (bytes sent + received) in Mbit/s since the previous sample;
- ``users`` (ts, sid, user): one row per logged-in user (snapshot);
- ``procs`` (ts, sid, proc): one row per distinct running process name (snapshot).

Usage::

    register_host_source(spark)
    df = spark.readStream.format("moirae_host").option("stream", "metrics").option("period_s", "5").load()

At most one sample is taken per ``period_s`` (default 5). A live machine cannot be read
again in the past, so this source does not replay a micro-batch lost in a crash: the
archive's batch log (docs/ARCHITECTURE.md, 3.1) keeps what was delivered.

:func:`sample` is the plain-Python entry point (a dict of DataFrames, one per stream).
"""

from __future__ import annotations

import socket
import time

import pandas as pd
import psutil
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from moirae.sources.errors import InvalidReplayOption

FORMAT = "moirae_host"
HOST_STREAMS = ("metrics", "users", "procs")
SCHEMAS = {
    "metrics": "ts timestamp, sid string, cpu double, mem double, bw double",
    "users": "ts timestamp, sid string, user string",
    "procs": "ts timestamp, sid string, proc string",
}


class HostSampler:
    """Samples this host; keeps the previous network counters to turn bytes into a rate."""

    def __init__(self) -> None:
        self.sid = socket.gethostname()
        self._net: tuple[float, int] | None = None
        psutil.cpu_percent(interval=None)  # primes the CPU counter

    def metrics(self, now: float) -> tuple:
        io = psutil.net_io_counters()
        total = int(io.bytes_sent + io.bytes_recv) if io is not None else 0
        bw = 0.0
        if self._net is not None and now > self._net[0]:
            bw = max(0, total - self._net[1]) * 8 / 1e6 / (now - self._net[0])
        self._net = (now, total)
        return (float(psutil.cpu_percent(interval=None)), float(psutil.virtual_memory().percent), float(bw))

    @staticmethod
    def users() -> list[str]:
        return sorted({u.name for u in psutil.users() if u.name})

    @staticmethod
    def procs() -> list[str]:
        names = set()
        for p in psutil.process_iter(["name"]):
            name = p.info.get("name")
            if name:
                names.add(name)
        return sorted(names)

    def rows(self, stream: str, now: float) -> list[tuple]:
        ts = pd.Timestamp(int(now * 1e6), unit="us", tz="UTC").to_pydatetime()
        if stream == "metrics":
            return [(ts, self.sid, *self.metrics(now))]
        values = self.users() if stream == "users" else self.procs()
        return [(ts, self.sid, v) for v in values]


def sample(now: float | None = None) -> dict[str, pd.DataFrame]:
    """One snapshot of every host stream as DataFrames (bw is 0 on a first sample)."""
    s = HostSampler()
    t = time.time() if now is None else now
    cols = {"metrics": ["ts", "sid", "cpu", "mem", "bw"], "users": ["ts", "sid", "user"],
            "procs": ["ts", "sid", "proc"]}
    out = {}
    for stream in HOST_STREAMS:
        df = pd.DataFrame(s.rows(stream, t), columns=cols[stream])
        df["ts"] = pd.to_datetime(df["ts"], utc=True)
        out[stream] = df
    return out


class HostDataSource(DataSource):
    """``moirae_host``: this machine's metrics, users or processes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _opts(self) -> tuple[str, float]:
        opts = {str(k).lower(): str(v) for k, v in dict(self.options).items()}
        unknown = sorted(set(opts) - {"stream", "period_s"})
        if unknown:
            raise InvalidReplayOption(f"unknown {FORMAT} option(s): {', '.join(unknown)}")
        stream = opts.get("stream")
        if stream not in HOST_STREAMS:
            raise InvalidReplayOption(f"option 'stream' must be one of {', '.join(HOST_STREAMS)}, got {stream!r}")
        try:
            period = float(opts.get("period_s", "5"))
        except ValueError:
            raise InvalidReplayOption(f"option 'period_s' must be a number, got {opts['period_s']!r}") from None
        if not period > 0:
            raise InvalidReplayOption(f"option 'period_s' must be positive, got {period!r}")
        return stream, period

    def schema(self):
        return SCHEMAS[self._opts()[0]]

    def simpleStreamReader(self, schema) -> SimpleDataSourceStreamReader:
        stream, period = self._opts()
        return HostStreamReader(stream, period)


class HostStreamReader(SimpleDataSourceStreamReader):
    """One sample per ``period_s``; the offset counts the samples taken."""

    def __init__(self, stream: str, period_s: float) -> None:
        self.stream, self.period = stream, period_s
        self.sampler = HostSampler()
        self._last: float | None = None

    def initialOffset(self) -> dict:
        return {"n": 0}

    def read(self, start: dict):
        now = time.time()  # wall time is the data here: it stamps real measurements
        if self._last is not None and now - self._last < self.period:
            return iter([]), start
        self._last = now
        return iter(self.sampler.rows(self.stream, now)), {"n": int(start["n"]) + 1}

    def readBetweenOffsets(self, start: dict, end: dict):
        return iter([])


def register_host_source(spark) -> None:
    """Register ``moirae_host`` with ``spark`` (idempotent)."""
    spark.dataSource.register(HostDataSource)
