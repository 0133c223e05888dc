"""Cost curves: how the engine's cost grows with the event-queries on a source, the open
recall tasks and the archive's size. Three curves, each with its baseline (its first
point) measured in the same run:

1. **Sustained rate against event-queries on one source** (1, 2, 4, 8, 16; quick 1, 8).
   The engine (archive, Ananke provenance ANK-1, events archived) over Spark's JVM
   ``rate-micro-batch`` source shaped like the metrics stream
   (:func:`bench.engine.bursts.metrics_df`: ``ts``, ``sid = value % 1000``, ``bw``),
   with N copies of :func:`bench.engine.engine_jvm.overload` (a 5 s tumbling average per
   ``sid`` and a filter) reading it, ``local[2]``, trigger 1 s (quick 0.5 s). The source
   is backlogged and admits ``--rows-per-batch`` rows a batch, the same for every point
   (by default twice the last published 1-query rate per trigger, doubled while the
   discarded 1-query warm-up point idles between batches), so every query runs batch
   after batch: its rate is the rows of its batches that began after a warm-up, over
   the wall time from the first one's start to the last one's end
   (:func:`sustained_rate`); the engine's rate is the slowest of the queries that read
   the source. Every point is measured once a round, in ``--rate-rounds`` interleaved
   rounds (:func:`bench.harness.run_orders`), and each point's ratio to 1 query is taken
   within its round. A point whose queries were idle between batches (busy < 90 % of
   that span) was not saturated: its rate is only a lower bound, and says so.

   Baseline, in the same rounds on the same source and rows per batch: plain Spark with
   N copies of the same query, each a streaming query of its own (:func:`plain_point`).
   Spark runs each streaming query's plan on its own, reading and aggregating the source
   anew, so N queries cost the platform about N times one: the engine's event-queries
   inherit that cost (only the archive's is paid once, in the engine's 1 query too). Target: 8 queries >= 0.5x the rate of 1, or, in a round
   where plain Spark's 8 keep less than 0.5x of its 1, at least plain Spark's ratio of
   that round, every round; the ratio against the bare 0.5x is reported beside it.
2. **Time to first history against open recall tasks** (10, 100, 1000). No Spark: an
   engine over an archived stream of short chunks, one Recall operator (a bounded
   ``period``, so its tasks never suspend for feedback, M 4.4), and N open events: real
   event-log records whose Recall tasks are runnable in the stride scheduler
   (``recall.max_concurrent`` history-queries at a time), each with hundreds of chunks
   left. A fresh alert then enters where the event worker hands an alert over (the event
   log, then the Recall Manager's ``submit``); its time to first history is from its
   detection (the event record's clock, as the engine's ``alert_latencies``) to its
   first Recall output on the bus. Each point measures ``--alerts`` fresh alerts one
   after another (each cancelled after its first output; background tasks topped up to
   N), in ``--rounds`` interleaved rounds (:func:`bench.harness.run_orders`). Target:
   per round, the largest point's median over the smallest's <= 1.5 (flat).
3. **Driver RSS against archive size** (1M, 10M, 100M rows; quick 100k, 1M). One
   stream (``ts``, ``sid`` of 1000 keys, ``bw``; 1000 rows per second of event time,
   chunks chosen by the archive's default ``chunk_target_rows``) grown in place through
   the archive's bulk path (``Archiver.append(..., bulk=True)``: binary COPY, history
   chunks in the old tier, as a user's backfill), then aged. At each size a fresh
   Python process (the driver) opens an engine over that archive, submits ``--rss-alerts``
   alerts whose Recall reads the whole archive, waits for every task to end and samples
   its own RSS every 50 ms (no Spark: these runs start no JVM). Target: the largest
   size's peak RSS <= 1.5x the smallest's, in every round. A size that would not fit
   the disk or ``--load-budget`` seconds of loading (projected from the sizes before it)
   is not built: the largest that fits is measured, and the ceiling is recorded.

Run: ``python -m bench cost_curves [--quick] [--curves queries,open,rss]`` (published as
``cost_curves_quick`` when quick; ``--curves`` with fewer than all three prints, and
publishes nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from bench.engine.engine_e2e import OPEN_STATES, STOP_GRACE_S, Bench
from bench.harness import RESULTS, ROOT, exit_code, publish, run_orders, spread_note, target, verdict
from moirae.runtime.graceful_stop import stop_between_batches

MEASURES = ("bench/engine/cost_curves.py", "bench/engine/bursts.py", "bench/engine/engine_jvm.py", "moirae",
            "archive", "recall", "scheduler", "ananke")
CURVES = ("queries", "open", "rss")
QUERIES, QUICK_QUERIES = (1, 2, 4, 8, 16), (1, 8)
OPEN, QUICK_OPEN = (10, 100, 1000), (10, 100, 1000)
SIZES, QUICK_SIZES = (1_000_000, 10_000_000, 100_000_000), (100_000, 1_000_000)
QUERIES_GOAL, FLAT_GOAL, RSS_GOAL = 0.5, 1.5, 1.5
TRIGGER_S, QUICK_TRIGGER_S = 1.0, 0.5
SATURATED = 0.9  # busy share of a query's measured span below which its rate is a lower bound
HISTORY_SQL = "SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n FROM metrics h WHERE h.sid = :sid GROUP BY h.sid"
KEYS = 1000
T0 = datetime(2025, 1, 1, tzinfo=UTC)


# -- 1: sustained rate against event-queries ----------------------------------------------

def sustained_rate(progresses: list[dict], after_s: float, until_s: float) -> dict:
    """A query's rate over its batches that began at or after ``after_s`` and ended by
    ``until_s`` (epoch seconds): their input rows over the wall time from the first one's
    start to the last one's end, and the share of that span the query was busy (1.0 when
    batches ran back to back: saturated). None figures when fewer than one such batch.

    >>> p = [{"timestamp": "2026-11-28T00:00:0%dZ" % s, "numInputRows": 100,
    ...       "durationMs": {"triggerExecution": 2000}} for s in (0, 2, 4)]
    >>> t0 = datetime(2026, 11, 28, tzinfo=UTC).timestamp()
    >>> sustained_rate(p, t0 + 1, t0 + 6)
    {'batches': 2, 'rows': 200, 'seconds': 4.0, 'rows_per_s': 50.0, 'busy': 1.0}
    >>> sustained_rate(p, t0 + 1, t0 + 5)["batches"]  # the last batch ends at 6 s: not counted
    1
    """
    spans = []
    for p in progresses:
        if not p.get("numInputRows") or not p.get("durationMs"):
            continue
        begun = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        ended = begun + p["durationMs"].get("triggerExecution", 0) / 1000
        if begun >= after_s and ended <= until_s:
            spans.append((begun, ended, int(p["numInputRows"])))
    if not spans:
        return {"batches": 0, "rows": 0, "seconds": None, "rows_per_s": None, "busy": None}
    wall = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
    rows = sum(r for _, _, r in spans)
    busy = sum(e - b for b, e, _ in spans)
    return {"batches": len(spans), "rows": rows, "seconds": round(wall, 3),
            "rows_per_s": round(rows / wall, 1) if wall > 0 else None, "busy": round(busy / wall, 3) if wall else None}


def rate_point(b: Bench, n: int, rows_per_batch: int, ts_rate: int, warm_batches: int, batches: int,
               timeout_s: float, trigger_s: float = TRIGGER_S) -> dict:
    """The engine with ``n`` event-queries on one backlogged source: each query's
    :func:`sustained_rate` over ``batches`` batches after ``warm_batches``."""
    from bench.engine.bursts import metrics_df, metrics_queries
    from bench.engine.engine_jvm import overload

    e = b.engine(f"q{n}", spark={"trigger": f"{int(trigger_s * 1000)}ms"}, ananke={"enabled": True})
    base_us = time.time_ns() // 1000
    e.source("metrics", metrics_df(e.spark, ts_rate, base_us, rows_per_batch), ts="ts", lateness="2 seconds",
             indexes=[("sid",)])
    for i in range(n):
        e.event_query(f"overload{i}", overload, inputs=["metrics"])
    qs = []
    try:
        e.start()
        qs = metrics_queries(e)
        per_query = measure(qs, f"{n} event-queries", warm_batches, batches, timeout_s)
        alerts = sum(f.events_seen for f in e.deploy.flows.values())
    finally:
        e.close()
        for q in qs:
            if q.isActive:
                stop_between_batches(q, STOP_GRACE_S)
        b.drop_schemas()
    return _point(n, per_query, alerts, "event-queries")


def plain_point(b: Bench, n: int, rows_per_batch: int, ts_rate: int, warm_batches: int, batches: int,
                timeout_s: float) -> dict:
    """Plain Spark, the platform's own cost curve: ``n`` copies of the same event-query
    (no archive, no provenance), each a streaming query of its own over its own read of
    the same backlogged source, as a user of plain Spark would write them, each counting
    its batch's results (``foreachBatch``). Their batches run back to back (a zero
    trigger), so every rate is a capacity, not a share of a trigger interval."""
    from ananke.query import ProvQuery
    from bench.engine.bursts import metrics_df
    from bench.engine.engine_jvm import overload
    from moirae.runtime.spark import spark_session

    spark = spark_session()
    base_us = time.time_ns() // 1000
    qs = []
    try:
        for i in range(n):
            df = ProvQuery(enabled=False).source(metrics_df(spark, ts_rate, base_us, rows_per_batch), "metrics", "ts",
                                                 cols=["sid", "bw"], lateness="2 seconds")
            qs.append(overload(df).sink(f"overload{i}").df.writeStream.queryName(f"plain_overload{i}")
                      .foreachBatch(lambda batch_df, _bid: batch_df.count())
                      .option("checkpointLocation", str(b.tmp / f"plain_{n}_{i}_{uuid.uuid4().hex[:8]}"))
                      .trigger(processingTime="0 seconds").start())
        per_query = measure(qs, f"{n} plain queries", warm_batches, batches, timeout_s)
    finally:
        for q in qs:  # nothing of a plain query's is kept: stopped mid-batch, not after one (they run back to back)
            q.stop()
    return _point(n, per_query, None, "plain Spark queries")


def measure(qs: list, what: str, warm_batches: int, batches: int, timeout_s: float) -> dict[str, dict]:
    """Each of the running queries ``qs``'s :func:`sustained_rate` over ``batches``
    batches with rows after the first ``warm_batches`` of each; raises RuntimeError
    naming ``what`` when a query fails or the batches are not done within ``timeout_s``."""
    def counts() -> dict[str, int]:
        for q in qs:
            if q.exception() is not None:
                raise RuntimeError(f"{what}: query {q.name} failed: {q.exception()}")
        return {q.name: sum(1 for p in q.recentProgress if p.get("numInputRows")) for q in qs}

    def done(goal: dict[str, int]) -> bool:
        return all(c >= goal[name] for name, c in counts().items())

    deadline = time.monotonic() + timeout_s
    while not done({q.name: warm_batches for q in qs}):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: no {warm_batches} batches with rows within {timeout_s:g} s")
        time.sleep(0.25)
    after = time.time()
    goal = {name: c + batches + 1 for name, c in counts().items()}  # + the batch running at ``after``
    while not done(goal):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {batches} measured batches not done within {timeout_s:g} s")
        time.sleep(0.25)
    until = time.time()
    return {q.name: sustained_rate(q.recentProgress, after, until) for q in qs}


def _point(n: int, per_query: dict[str, dict], alerts: int | None, what: str) -> dict:
    rates = [x["rows_per_s"] for x in per_query.values()]
    rate = min(rates) if rates and None not in rates else None
    busy = min((x["busy"] for x in per_query.values() if x["busy"] is not None), default=None)
    print(f"{n:>3} {what}: {rate and f'{rate:,.0f}'} rows/s (slowest of {len(per_query)} queries; "
          f"least busy {busy})" + (f", {alerts} alerts" if alerts is not None else ""), flush=True)
    return {"queries": n, "rows_per_s": rate, "min_busy": busy, "saturated": busy is not None and busy >= SATURATED,
            "alerts": alerts, "per_query": per_query}


def queries_curve(b: Bench, points: tuple[int, ...], rows_per_batch: int | None, warm_batches: int, batches: int,
                  trigger_s: float = TRIGGER_S, rounds: int = 1, plain: bool = True) -> dict:
    """Curve 1: every point measured once a round, in ``rounds`` interleaved rounds
    (:func:`bench.harness.run_orders`), so a drift in the machine's load or the JVM's
    warmth falls on every point alike; each point's ratio to the baseline (1 query) is
    taken within each round (:func:`round_ratios`), and its rate is the median of its
    rounds'. With ``plain``, each round then measures plain Spark's points in the same
    order (:func:`plain_point`): the platform's own cost of more queries on a source.

    ``rows_per_batch`` None: :func:`default_rows_per_batch`, doubled (up to twice) while
    the discarded 1-query warm-up point is not saturated."""
    rpb, rpb_from = (rows_per_batch, "given") if rows_per_batch else default_rows_per_batch(trigger_s)
    ts_rate = max(1, int(rpb / (2 * trigger_s)))  # event time: one batch is 2 triggers of it
    for _ in range(1 if rows_per_batch else 3):
        try:  # JIT, Python workers, the first plans: a cold JVM's first point would be a weak baseline; discarded
            warm = rate_point(b, 1, rpb, ts_rate, 1, 2, timeout_s=240, trigger_s=trigger_s)
        except RuntimeError as exc:
            print(f"warm-up point: {exc}", flush=True)
            break
        if rows_per_batch or warm["saturated"]:
            break
        # one query idled between batches: the baseline would be a lower bound
        rpb, rpb_from = 2 * rpb, "doubled"
        ts_rate = max(1, int(rpb / (2 * trigger_s)))
        print(f"rows per batch: {rpb:,} (the warm-up's 1 query was not saturated)", flush=True)
    by_round: list[dict[int, dict]] = []
    plain_by_round: list[dict[int, dict]] = []

    def guarded(n: int, fn) -> dict:
        try:
            return fn()
        except RuntimeError as exc:  # a point that did not finish: recorded, the rest still measured
            print(f"{n:>3}: {exc}", flush=True)
            return {"queries": n, "rows_per_s": None, "min_busy": None, "saturated": False, "alerts": None,
                    "error": str(exc)[:300]}

    for i, order in enumerate(run_orders(points, rounds)):
        one = {}
        for n in order:
            print(f"round {i + 1}: ", end="", flush=True)
            one[n] = guarded(n, lambda n=n: rate_point(b, n, rpb, ts_rate, warm_batches, batches,
                                                       timeout_s=240 + 40 * n, trigger_s=trigger_s))
        by_round.append(one)
        if plain:
            other = {}
            for n in order:
                print(f"round {i + 1}: ", end="", flush=True)
                other[n] = guarded(n, lambda n=n: plain_point(b, n, rpb, ts_rate, warm_batches, batches,
                                                              timeout_s=240 + 40 * n))
            plain_by_round.append(other)
    out = {"baseline": None, "rows_per_batch": rpb, "rows_per_batch_from": rpb_from, "trigger_s": trigger_s,
           "event_time_rows_per_s": ts_rate, "warm_batches": warm_batches, "measured_batches": batches,
           "rounds": len(by_round), "points": curve_points(by_round, points)}
    out["baseline"] = {"queries": points[0], "rows_per_s": out["points"][0]["rows_per_s"]}
    if plain_by_round:
        out["plain"] = curve_points(plain_by_round, points)
    return out


def curve_points(by_round: list[dict[int, dict]], points: tuple[int, ...]) -> list[dict]:
    """Each point's summary over its rounds: median rate, ratios to the baseline (the
    first point) by round and their median, saturation, alerts, errors."""
    ratios = round_ratios(by_round, points[0])
    out = []
    for n in points:
        rates = [r[n]["rows_per_s"] for r in by_round if r[n]["rows_per_s"]]
        xs = [x for x in ratios[n] if x is not None]
        busy = [r[n]["min_busy"] for r in by_round if r[n]["min_busy"] is not None]
        out.append({"queries": n, "rows_per_s": round(statistics.median(rates), 1) if rates else None,
                    "over_baseline": round(statistics.median(xs), 3) if xs else None,
                    "over_baseline_by_round": ratios[n], "min_busy": min(busy, default=None),
                    "saturated": all(r[n]["saturated"] for r in by_round),
                    "saturated_by_round": [r[n]["saturated"] for r in by_round],
                    "alerts": sum(r[n]["alerts"] or 0 for r in by_round),
                    "by_round": [{k: r[n].get(k) for k in ("rows_per_s", "min_busy", "saturated", "alerts", "error")}
                                 for r in by_round],
                    **({"error": next(r[n]["error"] for r in by_round if r[n].get("error"))}
                       if any(r[n].get("error") for r in by_round) else {})})
    return out


def round_ratios(by_round: list[dict[int, dict]], base: int) -> dict[int, list[float | None]]:
    """Each point's rate over the baseline's of the same round (None where either has
    no rate).

    >>> r = [{1: {"rows_per_s": 100.0}, 8: {"rows_per_s": 60.0}}, {1: {"rows_per_s": 80.0}, 8: {"rows_per_s": None}}]
    >>> round_ratios(r, 1)
    {1: [1.0, 1.0], 8: [0.6, None]}
    """
    out: dict[int, list[float | None]] = {}
    for n in by_round[0]:
        out[n] = [round(r[n]["rows_per_s"] / r[base]["rows_per_s"], 3)
                  if r[n]["rows_per_s"] and r[base]["rows_per_s"] else None for r in by_round]
    return {n: out[n] for n in sorted(out)}


# -- 2: time to first history against open recall tasks -----------------------------------

class OpenTasks:
    """An engine (no Spark) over ``chunks`` chunks of 10 minutes of ``metrics`` and one
    Recall operator ``norm`` reading all of them; :meth:`point` opens N events and
    times fresh alerts."""

    def __init__(self, b: Bench, chunks: int, keys: int = 10) -> None:
        import numpy as np
        import pandas as pd

        from archive.streams import StreamSpec
        from recall.operator import Recall

        self.e = b.engine("open", archive={"chunk_span": "10m", "chunk_target_rows": 0})
        self.keys, self.n = keys, 0
        self.e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "bigint", "bw": "double"},
                                                         indexes=[("sid",)]))
        per_chunk = 60 * keys  # a row per key every 10 s
        for c in range(0, chunks, 50):  # 50 chunks an append
            n = min(50, chunks - c) * 60
            self.e.archiver.append("metrics", -(c + 1), pd.DataFrame({
                "ts": pd.date_range(T0 + timedelta(minutes=10 * c), periods=n, freq="10s").repeat(keys),
                "sid": np.tile(np.arange(keys, dtype=np.int64), n),
                "bw": np.random.default_rng(c).normal(50, 10, n * keys)}), bulk=True)
        self.end = T0 + timedelta(minutes=10 * chunks)
        self.e.archiver.demote(self.end, ["metrics"])
        self.e.archiver.age()
        self.e.deploy.manager.register(Recall("norm", HISTORY_SQL, period=timedelta(minutes=10 * chunks + 10),
                                              time_column="h.ts", store=self.e.archiver))
        self.chunks, self.rows = chunks, chunks * per_chunk

    def close(self) -> None:
        self.e.close()

    def _alert(self, tag: str):
        from moirae.ingest.events import EventRecord

        self.n += 1
        rec = EventRecord("overload", f"{tag}-{self.n}", self.end, {"sid": self.n % self.keys, "avg_bw": 91.5})
        t0 = time.monotonic()
        self.e.deploy.events.add([rec])
        self.log_s = time.monotonic() - t0  # the event log's durable insert, part of every alert's path
        self.e.deploy.manager.submit(rec.as_event(), ["norm"])
        return rec

    def open_count(self) -> int:
        return sum(1 for t in self.e.deploy.manager.tasks() if t.state.value in OPEN_STATES)

    def _wait_started(self, eids: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            started = {t.eid for t in self.e.deploy.manager.tasks() if t.outputs > 0}
            if eids <= started:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(eids - started)} of {len(eids)} open tasks had no output in {timeout:g} s")
            time.sleep(0.05)

    def fresh_ttfh(self, timeout: float = 120.0) -> tuple[float, dict]:
        """Time to first history of one fresh alert (then cancelled), and its task's own
        figures from submission: to its first chunk and its first result, and the time
        its history-queries and operator calls took."""
        from recall.api import Output, OutputKind

        eid = f"fresh-{self.n + 1}"
        sub = self.e.deploy.manager.bus.subscribe(
            eid=eid, accept=lambda o: isinstance(o, Output) and o.kind is not OutputKind.BOUNDARY
            and o.key != "__status__")
        try:
            rec = self._alert("fresh")
            assert rec.eid == eid
            item = sub.get(timeout=timeout)
            if item is None:
                raise RuntimeError(f"fresh alert {eid}: no Recall output within {timeout:g} s")
            latency = time.monotonic() - rec.detected_mono
        finally:
            sub.close()
        view = next(iter(self.e.deploy.manager.tasks(eid)), None)
        task = {} if view is None else {
            "log_s": round(self.log_s, 4),
            "first_chunk_s": view.time_to_first_chunk and round(view.time_to_first_chunk, 4),
            "first_result_s": view.time_to_first_result and round(view.time_to_first_result, 4),
            "spent_s": round(view.time_spent, 4)}
        try:
            self.e.deploy.manager.cancel(eid)
        except LookupError:  # its task already ended: nothing left open
            pass
        return latency, task

    def point(self, n: int, alerts: int, gap_s: float = 0.1) -> dict:
        """``alerts`` fresh alerts timed, each while ``n`` events have runnable tasks."""
        opened: set[str] = set()
        samples = []
        try:
            for _ in range(alerts):
                for _ in range(5):  # a task may end while others start: top up again
                    short = n - self.open_count()
                    if short <= 0:
                        break
                    new = {self._alert(f"bg{n}").eid for _ in range(short)}
                    opened |= new
                    self._wait_started(new, timeout=120 + n * 0.5)
                open_now = self.open_count()
                latency, task = self.fresh_ttfh()
                samples.append({"ttfh_s": round(latency, 4), "open_at_alert": open_now, "task": task})
                time.sleep(gap_s)
        finally:
            self.e.deploy.manager.cancel_many(opened & {t.eid for t in self.e.deploy.manager.tasks()
                                                       if t.state.value in OPEN_STATES})
            deadline = time.monotonic() + 60
            while self.open_count() and time.monotonic() < deadline:
                time.sleep(0.05)
        xs = [s["ttfh_s"] for s in samples]
        parts = {k: [s["task"][k] for s in samples if s["task"].get(k) is not None] for k in ("log_s", "first_result_s")}
        out = {"open": n, "median_s": round(statistics.median(xs), 4), "min_s": min(xs), "max_s": max(xs),
               **{f"{k[:-2]}_median_s": round(statistics.median(v), 4) for k, v in parts.items() if v},
               "open_at_alert_min": min(s["open_at_alert"] for s in samples), "samples": samples}
        print(f"{n:>5} open tasks: time to first history median {out['median_s']} s "
              f"({out['min_s']}-{out['max_s']}), at least {out['open_at_alert_min']} open", flush=True)
        return out


def flatness(rounds: list[dict[int, dict]], key: str = "median_s") -> list[float]:
    """Per round, the largest median time to first history over the smallest (``key``:
    another median of the points, such as the Recall Manager's part).

    >>> flatness([{10: {"median_s": 0.02}, 1000: {"median_s": 0.05}}, {10: {"median_s": 0.03}, 1000: {"median_s": 0.03}}])
    [2.5, 1.0]
    """
    return [round(max(p[key] for p in r.values()) / min(p[key] for p in r.values()), 3)
            for r in rounds]


def open_curve(b: Bench, points: tuple[int, ...], alerts: int, rounds: int, chunks: int) -> dict:
    """Curve 2: the points interleaved over ``rounds`` on one engine."""
    ot = OpenTasks(b, chunks)
    try:
        ot.point(points[0], 2)  # warm-up: connections, the operator's first plans; discarded
        by_round = []
        for order in run_orders(points, rounds):
            r = {n: ot.point(n, alerts) for n in order}
            by_round.append({n: r[n] for n in points})
    finally:
        ot.close()
        b.drop_schemas()
    medians = {n: statistics.median(r[n]["median_s"] for r in by_round) for n in points}
    return {"baseline": {"open": points[0], "median_s": round(medians[points[0]], 4)}, "chunks_per_task": ot.chunks, "archive_rows": ot.rows, "alerts_per_point": alerts, "rounds": len(by_round),
            "points": [{"open": n, "median_s": round(medians[n], 4),
                        "over_baseline": round(medians[n] / medians[points[0]], 3),
                        "by_round": [r[n] for r in by_round]} for n in points],
            "flatness_by_round": flatness(by_round)}


# -- 3: driver RSS against archive size ----------------------------------------------------

def grow_archive(archiver, have: int, want: int, batch: int = 250_000) -> None:
    """Append rows ``have`` .. ``want`` - 1 of the stream ``metrics`` through the bulk path:
    row i at T0 + i ms, ``sid = i % 1000``."""
    import numpy as np
    import pyarrow as pa

    for start in range(have, want, batch):
        i = np.arange(start, min(want, start + batch), dtype=np.int64)
        ts = pa.array(int(T0.timestamp() * 1_000_000) + i * 1000, pa.timestamp("us", tz="UTC"))
        table = pa.table({"ts": ts, "sid": pa.array(i % KEYS), "bw": pa.array((i * 2654435761 % 1000) / 10.0)})
        archiver.append("metrics", -(start // batch + 1), table, bulk=True)
    end = T0 + timedelta(milliseconds=want)
    archiver.demote(end, ["metrics"])
    archiver.age()


def schema_bytes(dsn: str, schema: str) -> int:
    import psycopg2

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
                    (schema,))
        return int(cur.fetchone()[0])


def rss_child(dsn: str, schema: str, data_dir: str, rows: int, alerts: int, timeout: float) -> dict:
    """In a fresh process: open an engine over the archive, run ``alerts`` alerts whose
    Recall reads all ``rows`` rows of it, and sample this process's RSS throughout."""
    me = psutil.Process()
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(me.memory_info().rss)
            stop.wait(0.05)

    threading.Thread(target=sample, daemon=True).start()
    from moirae import Engine
    from moirae.ingest.events import EventRecord
    from recall.operator import Recall

    start_mb = me.memory_info().rss / 2**20
    e = Engine.from_config(None, data_dir=data_dir, postgres={"dsn": dsn, "schema": schema})
    try:
        chunks = len(e.archiver.chunks("metrics"))
        open_mb = me.memory_info().rss / 2**20
        end = T0 + timedelta(milliseconds=rows)
        e.deploy.manager.register(Recall("norm", HISTORY_SQL, period=end - T0 + timedelta(minutes=1),
                                         time_column="h.ts", store=e.archiver))
        t0 = time.monotonic()
        for k in range(alerts):
            rec = EventRecord("overload", f"rss-{k}", end, {"sid": k * 37 % KEYS, "avg_bw": 91.5})
            e.deploy.events.add([rec])
            e.deploy.manager.submit(rec.as_event(), ["norm"])
        while any(t.state.value in OPEN_STATES for t in e.deploy.manager.tasks()):
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{rows:,} rows: recall tasks not done in {timeout:g} s")
            time.sleep(0.1)
        recall_s = time.monotonic() - t0
        views = e.deploy.manager.tasks()
        chunks_read = sum(t.chunks_done for t in views)
        rows_read = sum(t.rows for t in views)
    finally:
        e.close()
    stop.set()
    return {"chunks": chunks, "start_mb": round(start_mb, 1), "open_mb": round(open_mb, 1),
            "peak_mb": round(max(samples) / 2**20, 1), "end_mb": round(samples[-1] / 2**20, 1),
            "recall_s": round(recall_s, 2), "chunks_read": chunks_read, "history_rows": rows_read}


def run_rss_child(b: Bench, schema: str, rows: int, alerts: int, timeout: float = 900.0) -> dict:
    args = json.dumps({"dsn": b.dsn, "schema": schema, "data_dir": str(b.tmp / f"rss_{uuid.uuid4().hex[:6]}"),
                       "rows": rows, "alerts": alerts, "timeout": timeout})
    out = subprocess.run([sys.executable, "-m", "bench.engine.cost_curves", "--rss-child", args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout + 120, check=False)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"RSS run over {rows:,} rows failed (exit {out.returncode}): {out.stderr[-800:]}")
    return json.loads(lines[-1])


def disk_free(dsn: str) -> int:
    """Free bytes on the file system holding the database's data directory (the embedded
    server's under the repository; an external one's unknown: the repository's)."""
    data = ROOT / ".moirae-bench"
    return shutil.disk_usage(data if data.exists() else ROOT).free


def rss_curve(b: Bench, sizes: tuple[int, ...], alerts: int, rounds: int, load_budget_s: float) -> dict:
    """Curve 3: one archive grown to each size in turn; at each, ``rounds`` driver runs."""
    from archive.streams import StreamSpec

    e = b.engine("rss")
    schema = b.schemas[-1]
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "bigint", "bw": "double"},
                                                indexes=[("sid",)]))
    e.archiver.fix_interval("metrics", sizes[-1], timedelta(milliseconds=sizes[-1]))
    points, have, load_s, ceiling = [], 0, 0.0, None
    try:
        for size in sizes:
            if have:  # project this size's load from the ones before it
                per_row_s, per_row_b = load_s / have, schema_bytes(b.dsn, schema) / have
                need_s, need_b = per_row_s * (size - have), per_row_b * (size - have)
                if load_s + need_s > load_budget_s:
                    ceiling = {"rows": size, "limit": "time", "projected_load_s": round(load_s + need_s),
                               "budget_s": load_budget_s}
                elif need_b * 1.3 > disk_free(b.dsn):
                    ceiling = {"rows": size, "limit": "disk", "projected_bytes": int(need_b),
                               "free_bytes": disk_free(b.dsn)}
                if ceiling:
                    print(f"archive of {size:,} rows not built: {ceiling}", flush=True)
                    break
            t0 = time.monotonic()
            grow_archive(e.archiver, have, size)
            load_s += time.monotonic() - t0
            have = size
            nbytes = schema_bytes(b.dsn, schema)
            try:
                runs = [run_rss_child(b, schema, size, alerts) for _ in range(rounds)]
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                ceiling = {"rows": size, "limit": "driver run failed", "error": str(exc)[:300]}
                print(f"archive of {size:,} rows: {exc}", flush=True)
                break
            points.append({"rows": size, "load_s_total": round(load_s, 1), "archive_bytes": nbytes,
                           "peak_mb": statistics.median(r["peak_mb"] for r in runs), "runs": runs})
            print(f"{size:>12,} rows ({nbytes / 2**30:.2f} GiB, {runs[0]['chunks']} chunks, loaded in "
                  f"{load_s:.0f} s so far): driver peak RSS {[r['peak_mb'] for r in runs]} MB", flush=True)
    finally:
        e.close()
        b.drop_schemas()
    base = points[0]
    for p in points:
        p["over_baseline_by_round"] = [round(r["peak_mb"] / q["peak_mb"], 3) for r, q in zip(p["runs"], base["runs"],
                                                                                             strict=True)]
    return {"baseline": {"rows": base["rows"], "peak_mb": base["peak_mb"]},
            "alerts": alerts, "rounds": rounds, "load_budget_s": load_budget_s, "sizes_asked": list(sizes),
            "ceiling": ceiling, "points": points}


# -- verdicts and report -------------------------------------------------------------------

def targets(data: dict) -> list[dict]:
    """8 event-queries >= 0.5x the rate of 1, or, where plain Spark's own 8 queries keep
    less than 0.5x of its 1 in the same round (the platform's cost: each streaming query
    reads and aggregates the source anew), at least plain Spark's ratio, every
    round; the ratio against the bare 0.5x is reported beside it. Time to first history
    flat within 1.5x over the open-task points, every round; driver peak RSS at the
    largest archive <= 1.5x the smallest's, every round."""
    out = []
    q = data["queries"]
    pts = {p["queries"]: p for p in q["points"]}
    base, eight = pts[1], pts.get(8)
    plain = {p["queries"]: p for p in q.get("plain", ())}
    if eight is not None:
        xs = eight.get("over_baseline_by_round") or [eight["over_baseline"]]
        rounds = len(xs)
        base_sat = base.get("saturated_by_round") or [base["saturated"]] * rounds
        eight_sat = eight.get("saturated_by_round") or [eight["saturated"]] * rounds
        ceiling = ((plain[8].get("over_baseline_by_round") or [plain[8].get("over_baseline")] * rounds)
                   if 8 in plain and 1 in plain else None)
        goals = [QUERIES_GOAL] * rounds if ceiling is None else [
            None if c is None else min(QUERIES_GOAL, c) for c in ceiling]
        rel = [None if x is None or g is None else x / g for x, g in zip(xs, goals, strict=True)]
        met = None if None in rel else verdict(rel, 1.0)
        faster = [p for p in q["points"] if p["queries"] > 1 and (p["rows_per_s"] or 0) > (base["rows_per_s"] or 0)]
        if None in rel:
            note = f"no rate in a round: {base.get('error') or eight.get('error') or plain.get(8, {}).get('error')}"
        elif met and not all(base_sat):  # that round's baseline rate is a lower bound: its ratio an upper one
            met, note = None, "the 1-query baseline was not saturated in a round: its rate is a lower bound"
        elif met is False and not all(eight_sat):  # the 8-query rate a lower bound, and so the ratio
            met, note = None, "the 8-query point was not saturated in a round: its rate is a lower bound"
        elif met and ceiling is not None and not all(plain[8].get("saturated_by_round", [True])):
            met, note = None, "plain Spark's 8 queries were not saturated in a round: the ceiling is a lower bound"
        elif met is None:
            note = (spread_note(xs, QUERIES_GOAL) if ceiling is None else
                    spread_note(rel, 1.0).replace("rounds (", "rounds' ratios to their round's goal ("))
        else:
            note = f"{rounds} interleaved rounds"
        if faster:  # reported: several queries on one source may run faster than one (see the section)
            note += (f"; {faster[0]['queries']} queries ran faster than 1 ({faster[0]['rows_per_s']:,.0f} vs "
                     f"{base['rows_per_s']:,.0f} rows/s, medians of the rounds)")
        shown = ", ".join("-" if x is None else f"{x:.3f}" for x in xs)
        rates = (f" (medians {eight['rows_per_s']:,.0f} vs {base['rows_per_s']:,.0f} rows/s)"
                 if eight["rows_per_s"] and base["rows_per_s"] else "")
        if ceiling is None:
            out.append(target("cost curve: sustained rate with 8 event-queries on one source vs 1 (full engine, JVM "
                              "rate source), by round", f">= {QUERIES_GOAL}x", shown + rates, met, note))
        else:
            cap = ", ".join("-" if c is None else f"{c:.3f}" for c in ceiling)
            out.append(target("cost curve: sustained rate with 8 event-queries on one source vs 1 (full engine, JVM "
                              "rate source), by round, against plain Spark's own 8 vs 1 in the same round",
                              f">= min({QUERIES_GOAL}x, plain Spark's)", f"{shown}{rates}; plain Spark {cap}", met,
                              note))
            out.append(target("cost curve: the same against the bare goal (plain Spark's own ratio is the "
                              "platform's cost of more queries)", "reported", f"{shown} vs {QUERIES_GOAL}x; plain Spark {cap}", None,
                              "restated against plain Spark's own ratio above"))
    o = data["open"]
    flat = o["flatness_by_round"]
    lo, hi = o["points"][0]["open"], o["points"][-1]["open"]
    out.append(target(f"cost curve: time to first history, {lo} to {hi} open recall tasks (largest median over "
                      "smallest, by round)", f"<= {FLAT_GOAL}x", ", ".join(f"{x:.2f}" for x in flat),
                      verdict(flat, FLAT_GOAL, at_least=False)))
    rounds = ([{p["open"]: p["by_round"][i] for p in o["points"]} for i in range(len(o["points"][0]["by_round"]))]
              if all("by_round" in p for p in o["points"]) else [])
    if rounds and all("first_result_median_s" in x for r in rounds for x in r.values()):
        part = flatness(rounds, "first_result_median_s")
        out.append(target(f"cost curve: the Recall Manager's part of it, submit to first result, {lo} to {hi} open "
                          "tasks (largest median over smallest, by round)", "reported",
                          ", ".join(f"{x:.2f}" for x in part), None,
                          "the rest is the event log's durable insert, the same work at every point"))
    r = data["rss"]
    top = r["points"][-1]
    ratios = top["over_baseline_by_round"]
    cap = r.get("ceiling")
    out.append(target(f"cost curve: driver peak RSS, archive of {top['rows']:,} rows vs {r['points'][0]['rows']:,}",
                      f"<= {RSS_GOAL}x", ", ".join(f"{x:.2f}" for x in ratios), verdict(ratios, RSS_GOAL, at_least=False),
                      f"{cap['rows']:,} rows not built ({cap['limit']}): {top['rows']:,} is the largest measured"
                      if cap else ""))
    return out


WORDS = {True: "met", False: "missed", None: "unresolved"}


def markdown(data: dict) -> str:
    q, o, r = data["queries"], data["open"], data["rss"]
    lines = [f"## Cost curves (`bench/engine/cost_curves.py`{' --quick' if data['quick'] else ''})", "",
             f"Load average at the start {data['load_avg']}."
             + (f" Run with `{' '.join(data['options'])}`: smaller than the full run's defaults (the module doc)."
                if data.get("options") else ""), "",
             f"**Sustained rate against event-queries on one source.** The engine (archive, ANK-1 provenance, events "
             f"archived) on Spark's JVM `rate-micro-batch` source, backlogged, {q['rows_per_batch']:,} rows per batch, "
             f"trigger {q['trigger_s']:g} s, `local[2]`; N copies of the 5 s tumbling average per sid with a filter. "
             f"Rate: rows of the {q['measured_batches']} batch(es) after {q['warm_batches']} warm-up batch(es), over "
             f"their wall span; the slowest query reading the source. {q.get('rounds', 1)} interleaved round(s), "
             "every point once a round; a point's ratio to 1 query is taken within each round."
             + (f" Rows per batch: {RPB_FROM.get(q.get('rows_per_batch_from'), 'as given')}." if
                q.get("rows_per_batch_from") else ""), ""]
    if q.get("plain"):
        lines += ["Plain Spark, in the same rounds, on the same source and rows per batch: N copies of the same "
                  "event-query, each its own streaming query reading the source (no archive, no provenance), "
                  "batches back to back. Its 8-vs-1 ratio is the platform's own cost of more queries, which the "
                  "engine's event-queries inherit: each streaming query reads and aggregates the source anew.", ""]
    lines += _rate_table(q["points"], "event-queries", alerts=True)
    if q.get("plain"):
        lines += [""] + _rate_table(q["plain"], "plain Spark queries", alerts=False)
    lines += ["", f"**Time to first history against open recall tasks.** No Spark; {o['archive_rows']:,} rows in "
                  f"{o['chunks_per_task']} chunks of 10 min, one Recall over all of them (bounded, so tasks stay "
                  f"runnable); {o['alerts_per_point']} fresh alerts per point, {o['rounds']} interleaved rounds; "
                  "detection to first Recall output. Of that, by round (medians, ms): the event log's durable "
                  "insert, the same work at every point, and the Recall Manager's part, from `submit` to the task's "
                  "first result (its scheduling among the open tasks, its first chunk's history-query).", "",
              "| open tasks | median s (of the rounds' medians) | vs first | by round: median s (min-max) | "
              "event log ms, by round | submit to first result ms, by round |",
              "|---|---|---|---|---|---|"]

    def ms(xs: list[dict], key: str) -> str:
        return ", ".join("-" if x.get(key) is None else f"{x[key] * 1000:.1f}" for x in xs)

    for p in o["points"]:
        by = "; ".join(f"{x['median_s']} ({x['min_s']}-{x['max_s']})" for x in p["by_round"])
        lines.append(f"| {p['open']} | {p['median_s']} | {p['over_baseline']} | {by} | "
                     f"{ms(p['by_round'], 'log_median_s')} | {ms(p['by_round'], 'first_result_median_s')} |")
    lines += ["", f"**Driver RSS against archive size.** One stream grown in place through the archive's bulk path "
                  f"(binary COPY), then aged; at each size a fresh driver process opens the engine and runs "
                  f"{r['alerts']} alerts whose Recall reads the whole archive ({r['rounds']} runs per size; no JVM "
                  "in these runs).", "",
              "| rows | archive GiB | chunks | loaded by then (s) | recall s | driver RSS after open MB | peak MB | "
              "vs smallest, by run |", "|---|---|---|---|---|---|---|---|"]
    for p in r["points"]:
        x = p["runs"][0]
        lines.append(f"| {p['rows']:,} | {p['archive_bytes'] / 2**30:.2f} | {x['chunks']} | {p['load_s_total']} | "
                     f"{'/'.join(str(y['recall_s']) for y in p['runs'])} | {x['open_mb']} | "
                     f"{'/'.join(str(y['peak_mb']) for y in p['runs'])} | "
                     f"{', '.join(str(v) for v in p['over_baseline_by_round'])} |")
    cap = r.get("ceiling")
    if cap and cap["limit"] == "driver run failed":
        lines += ["", f"Not measured: {cap['rows']:,} rows, its driver run failed ({cap['error']})."]
    elif cap:
        lines += ["", f"Not built: {cap['rows']:,} rows, which would exceed the {cap['limit']} "
                      + (f"budget ({cap['projected_load_s']} s of loading projected, {cap['budget_s']:g} s allowed)."
                         if cap["limit"] == "time" else
                         f"left ({cap['projected_bytes'] / 2**30:.1f} GiB projected, "
                         f"{cap['free_bytes'] / 2**30:.1f} GiB free).")]
    lines.append("")
    for t in data["targets"]:
        lines.append(f"- {t['what']}: {t['measured']} ({t['target']}): **{WORDS[t['met']]}**"
                     + (f" ({t['note']})." if t.get("note") else "."))
    return "\n".join(lines)


RPB_FROM = {"cost_curves": "twice the 1-query rate of the last published run, per trigger",
            "engine_jvm": "twice the last published provenance capacity of engine_jvm, per trigger",
            "doubled": "doubled from the last published figures until the discarded 1-query warm-up ran batch after "
                       "batch",
            "given": "as given (--rows-per-batch)"}


def _rate_table(points: list[dict], what: str, alerts: bool) -> list[str]:
    head = (f"| {what} | rows/s (median of rounds) | vs 1 (median) | vs 1 by round | rows/s by round | "
            "least busy share | saturated |" + (" alerts |" if alerts else ""))
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for p in points:
        rate = f"{p['rows_per_s']:,.0f}" if p["rows_per_s"] else "-"
        sat = "yes" if p["saturated"] else ("no (a lower bound)" if p["rows_per_s"] else f"failed: {p.get('error')}")
        by = ", ".join("-" if x is None else f"{x:.3f}" for x in p.get("over_baseline_by_round", [p["over_baseline"]]))
        rates = ", ".join("-" if not r.get("rows_per_s") else f"{r['rows_per_s']:,.0f}"
                          for r in p.get("by_round", [p]))
        lines.append(f"| {p['queries']} | {rate} | {p['over_baseline']} | {by} | {rates} | {p['min_busy']} | {sat} |"
                     + (f" {p['alerts']} |" if alerts else ""))
    return lines


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown({**data, "targets": targets(data)})


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    q = [p for p in data["queries"]["points"] if p["over_baseline"] is not None]
    ax[0].plot([p["queries"] for p in q], [p["over_baseline"] for p in q], "o-", label="engine")
    plain = [p for p in data["queries"].get("plain", ()) if p["over_baseline"] is not None]
    if plain:
        ax[0].plot([p["queries"] for p in plain], [p["over_baseline"] for p in plain], "s:", label="plain Spark")
    ax[0].axhline(QUERIES_GOAL, color="k", ls="--", lw=0.8, label=f"goal at 8: {QUERIES_GOAL}x of 1")
    ax[0].set(xscale="log", xlabel="queries on one source", ylabel="rate / rate with 1 query (median of rounds)",
              title="sustained rate")
    ax[0].minorticks_off()
    ax[0].set_xticks([p["queries"] for p in q], [str(p["queries"]) for p in q])
    ax[0].set_ylim(bottom=0)
    ax[0].legend(fontsize=7)
    for i in range(data["open"]["rounds"]):
        pts = data["open"]["points"]
        ax[1].plot([p["open"] for p in pts], [p["by_round"][i]["median_s"] * 1000 for p in pts], "o-",
                   label=f"round {i + 1}")
    ax[1].set(xscale="log", xlabel="open recall tasks", ylabel="ms (median)", title="time to first history")
    ax[1].set_ylim(bottom=0)
    ax[1].legend(fontsize=7)
    r = data["rss"]["points"]
    ax[2].plot([p["rows"] for p in r], [p["peak_mb"] for p in r], "o-", label="peak")
    ax[2].plot([p["rows"] for p in r], [p["runs"][0]["open_mb"] for p in r], "s:", label="after opening")
    ax[2].set(xscale="log", xlabel="archived rows", ylabel="driver RSS MB", title="driver memory")
    ax[2].set_ylim(0, 1.25 * max((p["peak_mb"] for p in r), default=1))
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    return fig


def default_rows_per_batch(trigger_s: float) -> tuple[int, str]:
    """Rows per batch for curve 1 and where the figure came from: twice the 1-query rate
    of the last published full run of this curve, per trigger, else twice the last
    published provenance capacity of ``engine_jvm``: enough that one query's batches run
    back to back (:func:`queries_curve` doubles it while they do not)."""
    try:
        prev = json.loads((RESULTS / "cost_curves.json").read_text())["queries"]["points"][0]["rows_per_s"]
        if prev:
            return int(2 * prev * trigger_s), "cost_curves"
    except (OSError, KeyError, IndexError, ValueError):
        pass
    prev = json.loads((RESULTS / "engine_jvm.json").read_text())
    return int(2 * prev["capacity"]["provenance"]["sustained_rows_per_s"] * trigger_s), "engine_jvm"


def counts(option: str, text: str | None) -> tuple[int, ...]:
    """Positive counts separated by commas ('' or None: none given).

    >>> counts("--sizes", "1000,10000"), counts("--sizes", None)
    ((1000, 10000), ())
    >>> counts("--open", "10,ten")
    Traceback (most recent call last):
    ...
    SystemExit: cost_curves: --open takes positive counts separated by commas; 'ten' is not one
    """
    out = []
    for x in (text or "").split(","):
        if x.strip():
            try:
                out.append(int(x))
            except ValueError:
                out.append(0)
            if out[-1] <= 0:
                raise SystemExit(f"cost_curves: {option} takes positive counts separated by commas; {x.strip()!r} "
                                 "is not one")
    return tuple(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, smaller points")
    ap.add_argument("--curves", default=",".join(CURVES), help=f"which curves, of {','.join(CURVES)}")
    ap.add_argument("--rows-per-batch", type=int, default=None, help="curve 1's source rows per batch")
    ap.add_argument("--alerts", type=int, default=None, help="curve 2's fresh alerts per point (default 30; quick 5)")
    ap.add_argument("--rounds", type=int, default=None, help="curve 2's interleaved rounds (default 3; quick 2)")
    ap.add_argument("--rate-rounds", type=int, default=None,
                    help="curve 1's interleaved rounds (default 4; quick 4: two cycles of the quick points)")
    ap.add_argument("--queries", default=None, help="curve 1's event-query counts, comma-separated, 1 first")
    ap.add_argument("--open", default=None, help="curve 2's open-task counts, comma-separated")
    ap.add_argument("--sizes", default=None, help="curve 3's archive sizes in rows, comma-separated")
    ap.add_argument("--load-budget", type=float, default=None,
                    help="curve 3's seconds of archive loading allowed (default 900; quick 120)")
    ap.add_argument("--rss-alerts", type=int, default=8, help="curve 3's alerts per driver run")
    ap.add_argument("--rss-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child is not None:
        print(json.dumps(rss_child(**json.loads(args.rss_child))), flush=True)
        return 0
    curves = [c.strip() for c in args.curves.split(",") if c.strip()]
    bad = [c for c in curves if c not in CURVES]
    if bad:
        raise SystemExit(f"cost_curves: no curve named {bad[0]!r}; there are: {', '.join(CURVES)}")
    quick = args.quick
    sizes = counts("--sizes", args.sizes) or (QUICK_SIZES if quick else SIZES)
    queries = counts("--queries", args.queries) or (QUICK_QUERIES if quick else QUERIES)
    opened = counts("--open", args.open) or (QUICK_OPEN if quick else OPEN)
    if queries[0] != 1:
        raise SystemExit(f"cost_curves: --queries starts with the baseline, 1, not {queries[0]}")
    own = [x for x in (sys.argv[1:] if argv is None else argv) if x != "--quick"]
    data: dict = {"quick": quick, "options": own, "load_avg": [round(x, 2) for x in psutil.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="moirae-curves-") as d:
        b = Bench(Path(d))
        try:
            if "rss" in curves:
                data["rss"] = rss_curve(b, sizes, args.rss_alerts, rounds=2,
                                        load_budget_s=args.load_budget or (120.0 if quick else 900.0))
            if "open" in curves:
                data["open"] = open_curve(b, opened, args.alerts or (5 if quick else 30),
                                          args.rounds or (2 if quick else 3), chunks=200 if quick else 600)
            if "queries" in curves:
                from moirae.runtime.spark import spark_session

                spark_session(extra={"spark.python.authenticate.socketTimeout": "120s"})
                trigger = QUICK_TRIGGER_S if quick else TRIGGER_S
                data["queries"] = queries_curve(b, queries, args.rows_per_batch,
                                                warm_batches=1, batches=2 if quick else 3, trigger_s=trigger,
                                                rounds=args.rate_rounds or 4)
        finally:
            b.drop_schemas()
    if set(curves) != set(CURVES):
        print(json.dumps(data, indent=1, default=str))
        return 0
    data["targets"] = targets(data)
    fig = None
    try:
        fig = figure(data)
    except Exception as exc:  # the figure is optional; the figures are in the JSON
        print(f"no figure: {exc}")
    publish("cost_curves_quick" if quick else "cost_curves", data, markdown(data), fig, targets=data["targets"])
    for t in data["targets"]:
        print(f"{t['what']}: {t['measured']} ({t['target']}): {WORDS[t['met']]}", flush=True)
    return exit_code(data["targets"])


if __name__ == "__main__":
    raise SystemExit(main())
