"""Helpers of the Recall Manager tests: a real archive to recall from, and a small
recall operator that records what the manager delivered to it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive.archiver import Archiver
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from recall.api import EndReason, Interval, Output, OutputKind, TaskSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPAN = timedelta(hours=1)


def make_archive(db, chunks: int = 6, rows_per_chunk: int = 5, hosts=("a", "b")) -> Archiver:
    """An Archiver with stream ``metrics(ts, host, v)``: ``chunks`` one-hour chunks from
    T0, ``rows_per_chunk`` rows per host per chunk."""
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN))
    arch.register_stream(StreamSpec.build("metrics", "ts", {"host": "text", "v": "double"}))
    if chunks:
        load(arch, chunks, rows_per_chunk, hosts)
    return arch


def load(arch: Archiver, chunks: int, rows_per_chunk: int, hosts=("a", "b"), batch_id: int = 0) -> None:
    n = chunks * rows_per_chunk
    offs = (np.arange(n) * (SPAN / rows_per_chunk).total_seconds()).astype("float64")
    ts = pd.to_datetime(T0) + pd.to_timedelta(offs, unit="s")
    frames = [pd.DataFrame({"ts": ts, "host": h, "v": np.arange(n, dtype="float64")}) for h in hosts]
    arch.append("metrics", batch_id, pd.concat(frames, ignore_index=True), bulk=True)


def event(eid: str, chunk: int, **attrs: Any) -> dict[str, Any]:
    """An event at the middle of chunk ``chunk`` (counted from T0)."""
    return {"eid": eid, "ts": T0 + chunk * SPAN + SPAN / 2, **attrs}


class Recorder:
    """A recall operator: one INSERT per chunk (key = chunk id, row = row count), one
    final UPDATE on ``on_end`` unless cancelled. Thread-safe log of every call."""

    def __init__(self, store, name: str = "rec", sql: str = "SELECT host, v FROM metrics WHERE host = :host",
                 bound: timedelta | None = None, feedback_period: int | None = None,
                 feedback_timeout: float | None = None, tickets: int = 100,
                 params: Callable[[Mapping[str, Any]], dict] | None = None,
                 on_chunk_hook: Callable[[str, int], None] | None = None,
                 materialization: bool = False) -> None:
        self.name = name
        self.materialization = materialization
        self.query = store.prepare(sql)
        self.bound = bound
        self.feedback_period = feedback_period
        self.feedback_timeout = feedback_timeout
        self.tickets = tickets
        self.params = params or (lambda e: {"host": e.get("host", "a")})
        self.hook = on_chunk_hook
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, Any]] = []  # (kind, eid, detail)
        self.states = 0

    def task_for(self, ev: Mapping[str, Any]) -> TaskSpec:
        return TaskSpec(
            operator=self.name, eid=ev["eid"], event_ts=ev["ts"], query=self.query, params=self.params(ev),
            bound=None if self.bound is None else ev["ts"] - self.bound, tickets=self.tickets,
            feedback_period=self.feedback_period, feedback_timeout=self.feedback_timeout,
            materialization=self.materialization,
        )

    def start(self, spec: TaskSpec) -> dict:
        with self.lock:
            self.states += 1
        return {"spec": spec, "seq": 0, "rows": 0}

    def on_chunk(self, state: dict, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        spec = state["spec"]
        with self.lock:
            self.log.append(("chunk", spec.eid, chunk_id))
        if self.hook:
            self.hook(spec.eid, chunk_id)
        state["rows"] += len(rows)
        state["seq"] += 1
        return [Output(self.name, spec.eid, spec.event_ts, OutputKind.INSERT, state["seq"], str(chunk_id),
                       {"rows": len(rows), "values": sorted(rows["v"].tolist()) if "v" in rows else []},
                       covered)]

    def on_end(self, state: dict, reason: EndReason) -> list[Output]:
        spec = state["spec"]
        with self.lock:
            self.log.append(("end", spec.eid, reason))
        if reason is EndReason.CANCELLED:
            return []
        state["seq"] += 1
        return [Output(self.name, spec.eid, spec.event_ts, OutputKind.UPDATE, state["seq"], "total",
                       {"rows": state["rows"], "reason": reason.value}, None)]

    def chunks_of(self, eid: str) -> list[int]:
        with self.lock:
            return [d for k, e, d in self.log if k == "chunk" and e == eid]

    def ends(self) -> dict[str, list]:
        out: dict[str, list] = {}
        with self.lock:
            for k, e, d in self.log:
                if k == "end":
                    out.setdefault(e, []).append(d)
        return out


class Collector:
    """An output sink that keeps everything (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outputs: list[Output] = []

    def __call__(self, o: Output) -> None:
        with self.lock:
            self.outputs.append(o)

    def of(self, eid: str, kind: OutputKind | None = None) -> list[Output]:
        with self.lock:
            return [o for o in self.outputs if o.eid == eid and (kind is None or o.kind is kind)]

    def boundaries(self) -> list[Output]:
        with self.lock:
            return [o for o in self.outputs if o.kind is OutputKind.BOUNDARY]


def wait_until(cond: Callable[[], bool], timeout: float = 20.0, every: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(every)
    return cond()
