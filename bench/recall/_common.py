"""Shared parts of the recall benchmarks: a database, a synthetic archive loaded through
the real Archiver, a minimal recall operator, and an output sink that timestamps the
first output of every event.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archive.archiver import Archiver
from archive.pg import Database
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from recall.api import EndReason, Interval, Output, OutputKind, TaskSpec

ROOT = Path(__file__).resolve().parents[2]
SPAN = timedelta(hours=1)
NOW = datetime(2026, 6, 1, tzinfo=UTC)  # the newest chunk ends here
HOSTS = 20
QUERY = "SELECT count(*) AS n, avg(v) AS m FROM metrics WHERE host = :host"


def database(tag: str) -> Database:
    """``MOIRAE_PG_DSN`` if set, else the embedded server under ``.moirae-bench``; a fresh
    schema per run (dropped by the caller)."""
    return Database.from_env(ROOT / ".moirae-bench", schema=f"bench_{tag}_{uuid.uuid4().hex[:8]}")


def archive(db: Database, streams=("metrics",)) -> Archiver:
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, statement_timeout_ms=600_000))
    for name in streams:
        arch.register_stream(StreamSpec.build(name, "ts", {"host": "text", "v": "double"}))
    return arch


def load_chunks(arch: Archiver, first_back: int, chunks: int, rows_per_chunk: int, batch_id: int,
                seed: int = 0, stream: str = "metrics") -> int:
    """Append ``chunks`` full chunks ending ``first_back`` chunks before NOW, going back in
    time (so a growing archive grows into the past, like real history). Rows carry their
    own source ids, so the load times COPY, not the id hash."""
    rng = np.random.default_rng(seed + batch_id)
    end = NOW - first_back * SPAN
    n = chunks * rows_per_chunk
    offs = rng.uniform(0, chunks * SPAN.total_seconds(), n)
    frame = pd.DataFrame({
        "ts": pd.Timestamp(end - chunks * SPAN) + pd.to_timedelta(offs, unit="s"),
        "host": np.char.add("h", rng.integers(0, HOSTS, n).astype(str)),
        "v": rng.normal(50, 10, n),
    })
    frame["_sid"] = np.arange(n, dtype=np.int64) + batch_id * 10**10
    arch.append(stream, batch_id, frame, bulk=True)
    return n


class FirstChunkOperator:
    """A recall operator with one output per chunk (the per-chunk aggregate row)."""

    def __init__(self, store: Archiver, sql: str = QUERY, name: str = "ttfr") -> None:
        self.name = name
        self.query = store.prepare(sql)

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        return TaskSpec(operator=self.name, eid=event["eid"], event_ts=event["ts"], query=self.query,
                        params={"host": event["host"]}, bound=None)

    def start(self, spec: TaskSpec) -> dict:
        return {"spec": spec, "seq": 0}

    def on_chunk(self, state: dict, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        spec = state["spec"]
        state["seq"] += 1
        row = rows.iloc[0].to_dict() if len(rows) else {}
        return [Output(self.name, spec.eid, spec.event_ts, OutputKind.INSERT, state["seq"], str(chunk_id),
                       row, covered)]

    def on_end(self, state: dict, reason: EndReason) -> list[Output]:
        return []


class FirstOutputClock:
    """Output sink: the wall time (perf_counter) of each event's first output and of its
    boundary (its tasks all ended), and a way to wait for either."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.cond = threading.Condition()

    def __call__(self, o: Output) -> None:
        with self.cond:
            if o.kind is OutputKind.BOUNDARY:
                self.ended.setdefault(o.eid, time.perf_counter())
            else:
                self.first.setdefault(o.eid, time.perf_counter())
            self.cond.notify_all()

    def wait_all(self, eids, timeout: float) -> bool:
        """Until every event has a first output or has ended; False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: all(e in self.first or e in self.ended for e in eids), timeout)


def first_result(mgr, sink: FirstOutputClock, eid: str, operator: str) -> tuple[float, float]:
    """(time to first result, submit time) in seconds of one event at the present, read
    by ``operator``; the rest of its task is cancelled."""
    i = int(eid.rsplit("-", 1)[-1])
    ev = {"eid": eid, "ts": NOW - timedelta(seconds=i + 1), "host": f"h{i % HOSTS}"}
    t0 = time.perf_counter()
    mgr.submit(ev, operator)
    t_submit = time.perf_counter() - t0
    if not sink.wait_all([eid], 120) or eid not in sink.first:
        failed = [v.error for v in mgr.tasks(eid) if v.error]
        raise RuntimeError(f"event {eid} got no first result: {failed or 'timeout after 120 s'}")
    ttfr = sink.first[eid] - t0
    if eid in mgr.open_events():
        mgr.cancel(eid)
    return ttfr, t_submit
