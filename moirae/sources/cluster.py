"""The ``cluster`` scenario: a seeded, vectorised generator of a monitored server cluster.

It reproduces the Moirae paper's running example (M §1, §3.1-3.5) as four streams:

- ``metrics`` (ts, sid, cpu, mem, bw): one row per server every ``metrics_period_s``;
  ``bw`` in Mbit/s is what the event-query of M fig. 1 averages over 5 minutes.
- ``users`` (ts, sid, user) and ``procs`` (ts, sid, proc): *snapshot rows*, one per
  logged-in user (running process) per server every ``context_period_s``. Snapshots make
  the context of an event a plain time-window join (M §3.3: "all valid tuples at the
  time when the event happens"). Who is logged in and what runs is redrawn per server
  per block (``block_minutes``) from each value's presence probability.
- ``incidents`` (ts, iid, sid, kind, cause, resolution): past overloads and failures.

Planted root causes (``causes`` in the scenario file) fire as a Poisson process. While a
cause is active on a server its metric is pushed to the cause's level (a bandwidth spike
for overloads, so the 5-minute average crosses X) and its users and processes appear in
that server's snapshots from ``lead_min`` before onset to the end. The incident row is
stamped ``detect_min`` after onset and carries the resolution applied. ``cause`` is the
ground truth (which planted cause produced the incident), so "same root cause"
precision@k can be measured; :func:`ground_truth` gives it with the cause's context.

Everything is a pure function of (config, block index): each block (an hour by default)
draws from its own ``SeedSequence(seed, spawn_key=(block, stream))``, so history chunks,
live spans and restarts all agree row for row, whatever span is asked for.

>>> from moirae.sources.cluster_config import parse_cluster_config
>>> g = ClusterScenario(parse_cluster_config({"servers": 2, "history_days": 1, "causes": []}))
>>> f = g.frames(g.config.start_ns, g.config.start_ns + 60_000_000_000)
>>> len(f["metrics"]), list(f["metrics"].columns)
(12, ['ts', 'sid', 'cpu', 'mem', 'bw'])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from moirae.sources.cluster_config import ClusterConfig, load_cluster_config
from moirae.sources.disorder import ReplayConfig, disorder

STREAMS = ("metrics", "users", "procs", "incidents")
_CODES = {"servers": 0, "metrics": 1, "users": 2, "procs": 3, "incidents": 4, "disorder": 5}
_S, _MIN, _DAY = 1_000_000_000, 60_000_000_000, 86_400_000_000_000


@dataclass(frozen=True)
class Incident:
    """One planted incident: ``onset_ns`` is when the cause starts acting on the server."""

    iid: int
    sid: str
    cause: int
    onset_ns: int
    end_ns: int
    context_from_ns: int
    ts_ns: int


def _utc(ns: np.ndarray) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(np.asarray(ns, dtype="int64").view("datetime64[ns]")).tz_localize("UTC")


class ClusterScenario:
    """Deterministic generator of the cluster streams (see the module docstring)."""

    def __init__(self, config: ClusterConfig, cache_blocks: int = 8) -> None:
        self.config = config
        self.sids = np.array([f"srv-{i:03d}" for i in range(config.servers)], dtype=object)
        rng = self._rng(0, "servers")
        m = config.metrics
        self._base = {  # per-server baselines around the configured means
            "cpu": rng.normal(m.cpu_mean, m.cpu_sd / 2, config.servers),
            "mem": rng.normal(m.mem_mean, m.mem_sd / 2, config.servers),
            "bw": np.abs(rng.normal(m.bw_mean_mbps, m.bw_sd_mbps / 2, config.servers)),
        }
        self._cache: OrderedDict[int, dict[str, pd.DataFrame]] = OrderedDict()
        self._cache_size = cache_blocks
        causes = config.causes
        self._reach_ns = int(max([(c.duration_min + c.lead_min) * _MIN for c in causes] + [0])
                             + config.detect_min * _MIN)

    @classmethod
    def from_file(cls, path: str) -> ClusterScenario:
        return cls(load_cluster_config(path))

    # -- randomness -------------------------------------------------------------------------

    def _rng(self, block: int, stream: str) -> np.random.Generator:
        ss = np.random.SeedSequence(self.config.seed, spawn_key=(block + 2**40, _CODES[stream]))
        return np.random.default_rng(ss)

    def block_of(self, t_ns: int) -> int:
        return (t_ns - self.config.start_ns) // self.config.block_ns

    def block_start(self, block: int) -> int:
        return self.config.start_ns + block * self.config.block_ns

    # -- incidents ----------------------------------------------------------------------------

    def block_incidents(self, block: int) -> list[Incident]:
        """Incidents whose onset falls in ``block`` (Poisson per cause, uniform in time and server)."""
        cfg = self.config
        rng = self._rng(block, "incidents")
        t0, step = self.block_start(block), int(cfg.metrics_period_s * _S)
        slots = cfg.block_ns // step
        out: list[Incident] = []
        for ci, cause in enumerate(cfg.causes):
            n = int(rng.poisson(cause.rate_per_day * cfg.block_ns / _DAY))
            onsets = t0 + np.sort(rng.integers(0, slots, n)) * step
            servers = rng.integers(0, cfg.servers, n)
            for onset, s in zip(onsets.tolist(), servers.tolist(), strict=True):
                out.append(Incident(
                    iid=block * 1000 + len(out), sid=str(self.sids[s]), cause=ci, onset_ns=onset,
                    end_ns=onset + int(cause.duration_min * _MIN),
                    context_from_ns=onset - int(cause.lead_min * _MIN),
                    ts_ns=onset + int(cfg.detect_min * _MIN)))
        return out

    def incidents_touching(self, a_ns: int, b_ns: int) -> list[Incident]:
        """Incidents whose context, effect or report overlaps [a, b)."""
        first = self.block_of(a_ns - self._reach_ns)
        last = self.block_of(b_ns + self._reach_ns)
        return [inc for blk in range(first, last + 1) for inc in self.block_incidents(blk)
                if inc.context_from_ns < b_ns and max(inc.end_ns, inc.ts_ns) >= a_ns]

    # -- one block ----------------------------------------------------------------------------

    def block_frames(self, block: int) -> dict[str, pd.DataFrame]:
        """The four streams for one block, sorted by (ts, sid)."""
        if block in self._cache:
            self._cache.move_to_end(block)
            return self._cache[block]
        t0 = self.block_start(block)
        t1 = t0 + self.config.block_ns
        incidents = self.incidents_touching(t0, t1)
        frames = {
            "metrics": self._metrics(block, t0, incidents),
            "users": self._context(block, t0, "users", incidents),
            "procs": self._context(block, t0, "procs", incidents),
            "incidents": self._incident_rows([i for i in incidents if t0 <= i.ts_ns < t1]),
        }
        self._cache[block] = frames
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return frames

    def _metrics(self, block: int, t0: int, incidents: list[Incident]) -> pd.DataFrame:
        cfg, m = self.config, self.config.metrics
        rng = self._rng(block, "metrics")
        step = int(cfg.metrics_period_s * _S)
        times = t0 + np.arange(cfg.block_ns // step, dtype="int64") * step
        n_t, n_s = len(times), cfg.servers
        hour = ((times // _S) % 86_400) / 3600.0
        swing = 1.0 + m.diurnal_amplitude * np.sin(2 * np.pi * (hour - 9.0) / 24.0)  # peak mid-afternoon
        values = {}
        for metric, sd in (("cpu", m.cpu_sd), ("mem", m.mem_sd), ("bw", m.bw_sd_mbps)):
            noise = rng.normal(0.0, sd, (n_t, n_s))
            values[metric] = self._base[metric][None, :] * swing[:, None] + noise
        sid_index = {s: i for i, s in enumerate(self.sids)}
        for inc in incidents:
            cause = cfg.causes[inc.cause]
            rows = (times >= inc.onset_ns) & (times < inc.end_ns)
            if rows.any():
                col = sid_index[inc.sid]
                sd = {"cpu": m.cpu_sd, "mem": m.mem_sd, "bw": m.bw_sd_mbps}[cause.metric] / 2
                values[cause.metric][rows, col] = cause.level + rng.normal(0.0, sd, int(rows.sum()))
        for metric in ("cpu", "mem"):
            np.clip(values[metric], 0.0, 100.0, out=values[metric])
        np.clip(values["bw"], 0.0, None, out=values["bw"])
        return pd.DataFrame({
            "ts": _utc(np.repeat(times, n_s)),
            "sid": np.tile(self.sids, n_t),
            "cpu": np.round(values["cpu"].ravel(), 3),
            "mem": np.round(values["mem"].ravel(), 3),
            "bw": np.round(values["bw"].ravel(), 3),
        })

    def _context(self, block: int, t0: int, stream: str, incidents: list[Incident]) -> pd.DataFrame:
        cfg = self.config
        col = "user" if stream == "users" else "proc"
        pool = cfg.users if stream == "users" else cfg.procs
        names = [name for name, _ in pool]
        probs = np.array([p for _, p in pool], dtype="float64")
        step = int(cfg.context_period_s * _S)
        times = t0 + np.arange(cfg.block_ns // step, dtype="int64") * step
        rng = self._rng(block, stream)
        present = rng.random((cfg.servers, len(names))) < probs[None, :]
        # Work on integer codes: vocabulary sorted by name, so code order is name order.
        planted = {v for inc in incidents
                   for v in (cfg.causes[inc.cause].users if stream == "users" else cfg.causes[inc.cause].procs)}
        vocab = np.array(sorted(set(names) | planted), dtype=object)
        code = {v: i for i, v in enumerate(vocab)}
        pool_codes = np.array([code[n] for n in names], dtype="int64")
        s_idx, v_idx = np.nonzero(present)
        n_t, n_s, n_v = len(times), cfg.servers, len(vocab)
        keys = [(np.arange(n_t, dtype="int64")[:, None] * n_s + s_idx[None, :]) * n_v + pool_codes[v_idx][None, :]]
        sid_index = {s: i for i, s in enumerate(self.sids)}
        for inc in incidents:  # the cause's values are on the server around the incident
            cause = cfg.causes[inc.cause]
            values = cause.users if stream == "users" else cause.procs
            t_sel = np.flatnonzero((times >= inc.context_from_ns) & (times < inc.end_ns))
            if values and len(t_sel):
                vc = np.array([code[v] for v in values], dtype="int64")
                keys.append((t_sel[:, None] * n_s + sid_index[inc.sid]) * n_v + vc[None, :])
        flat = np.concatenate([k.ravel() for k in keys])
        flat = np.unique(flat) if len(keys) > 1 else np.sort(flat)  # sorted by (ts, sid, value)
        v, rest = flat % n_v, flat // n_v
        return pd.DataFrame({"ts": _utc(times[rest // n_s]), "sid": self.sids[rest % n_s], col: vocab[v]})

    def _incident_rows(self, incidents: list[Incident]) -> pd.DataFrame:
        causes = self.config.causes
        incidents = sorted(incidents, key=lambda i: (i.ts_ns, i.iid))
        return pd.DataFrame({
            "ts": _utc(np.array([i.ts_ns for i in incidents], dtype="int64")),
            "iid": np.array([i.iid for i in incidents], dtype="int64"),
            "sid": np.array([i.sid for i in incidents], dtype=object),
            "kind": np.array([causes[i.cause].kind for i in incidents], dtype=object),
            "cause": np.array([causes[i.cause].name for i in incidents], dtype=object),
            "resolution": np.array([causes[i.cause].resolution for i in incidents], dtype=object),
        })

    # -- spans -------------------------------------------------------------------------------

    def frames(self, a_ns: int, b_ns: int, streams: tuple[str, ...] = STREAMS) -> dict[str, pd.DataFrame]:
        """All rows with event time in [a, b), per stream, sorted by (ts, sid)."""
        blocks = range(self.block_of(a_ns), self.block_of(b_ns - 1) + 1) if b_ns > a_ns else range(0)
        out = {}
        for stream in streams:
            parts = [self.block_frames(b)[stream] for b in blocks]
            df = pd.concat(parts, ignore_index=True) if parts else self.block_frames(0)[stream].iloc[:0]
            ns = df["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
            if len(ns) and (ns[0] < a_ns or ns[-1] >= b_ns):
                df = df[(ns >= a_ns) & (ns < b_ns)].reset_index(drop=True)
            out[stream] = df
        return out

    def history(self, until_ns: int | None = None, chunk_hours: float | None = None,
                streams: tuple[str, ...] = STREAMS) -> Iterator[tuple[int, int, dict[str, pd.DataFrame]]]:
        """Yield ``(start_ns, end_ns, frames)`` per chunk from ``start`` to ``until`` (default: the
        configured history), so an archive can be filled without holding it all in memory."""
        cfg = self.config
        end = cfg.history_end_ns if until_ns is None else until_ns
        span = int(round((chunk_hours or cfg.chunk_hours) * 3600e9))
        a = cfg.start_ns
        while a < end:
            b = min(a + span, end)
            yield a, b, self.frames(a, b, streams)
            a = b

    def live(self, a_ns: int, b_ns: int, stream: str, since_ns: int | None = None) -> pd.DataFrame:
        """Rows of ``stream`` whose *ingestion* time is in [a, b), in delivery order.

        ``since_ns`` is where the live stream began: rows with an earlier event time
        belong to the history (even when their ingestion is delayed past it) and are
        left out, so history plus live holds every row exactly once.

        Ingestion times follow ``config.live`` (DEBS'19 disorder, seeded per block and
        stream so each row's delay is fixed); with ``out_of_order`` 0 this is ``frames``
        plus an ``ingest_ts`` equal to ``ts``.
        """
        live = self.config.live
        max_delay = int(round(live.max_delay_ms * 1_000_000)) if live.out_of_order > 0 else 0
        first, last = self.block_of(a_ns - max_delay), self.block_of(b_ns - 1)
        parts = []
        for blk in range(first, last + 1):
            df = self.block_frames(blk)[stream]
            ev = df["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
            if max_delay:
                seed = int(np.random.SeedSequence(self.config.seed, spawn_key=(blk + 2**40, _CODES["disorder"],
                                                                              STREAMS.index(stream)))
                           .generate_state(1)[0])
                d = disorder(ev, ReplayConfig(ts_col="ts", out_of_order=live.out_of_order,
                                              min_delay_ms=live.min_delay_ms, max_delay_ms=live.max_delay_ms,
                                              distribution=live.distribution, seed=seed))
                ingest = d.ingest_ns
            else:
                ingest = ev
            keep = (ingest >= a_ns) & (ingest < b_ns)
            if since_ns is not None:
                keep &= ev >= since_ns
            part = df[keep].copy()
            part["ingest_ts"] = _utc(ingest[keep])
            parts.append(part)
        out = pd.concat(parts, ignore_index=True)
        order = np.argsort(out["ingest_ts"].to_numpy(dtype="datetime64[ns]").view("int64"), kind="stable")
        return out.iloc[order].reset_index(drop=True)


def ground_truth(scenario: ClusterScenario, incidents: pd.DataFrame) -> pd.DataFrame:
    """Per incident: the planted cause, its kind and the context values that cause plants.

    Two incidents share a root cause exactly when their ``cause`` values are equal; this
    is the relevance label for precision@k of Similarity Recall (M §3.4-3.5).
    """
    by_name = {c.name: c for c in scenario.config.causes}
    return pd.DataFrame({
        "iid": incidents["iid"].to_numpy(),
        "cause": incidents["cause"].to_numpy(),
        "kind": incidents["kind"].to_numpy(),
        "cause_users": [by_name[c].users for c in incidents["cause"]],
        "cause_procs": [by_name[c].procs for c in incidents["cause"]],
    })
