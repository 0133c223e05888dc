"""The engine end to end: alert-to-first-history latency, live throughput
against plain Spark, and a memory soak, on the ``cluster`` scenario (M fig. 1-4).

Each engine runs on the embedded PostgreSQL (``.moirae-bench``, or ``MOIRAE_PG_DSN``) in
a fresh schema (dropped afterwards) with a temporary data directory.

1. **Latency** (combined with the soak): the cluster scenario (a small file: few days of
   history, few servers, 300x live) runs for ``--soak`` minutes. A bus subscriber stamps
   each alert (the ``event`` item) and the first ``norm`` (Recall, M fig. 2) and first
   ``similar`` (Similarity Recall, M fig. 4) output of it; the engine's own
   ``alert_latencies`` (detection in the event log to first recall output) are reported
   too. Target: median <= 2 triggers + 200 ms.
2. **Throughput**: the same bounded live span of all four streams (``moirae_cluster``
   with ``speedup=max`` and ``until``), as fast as it goes, in four configurations:
   ``plain`` (the overload event-query function with provenance disabled and the other
   streams, written to Spark's ``noop`` sink), ``archive`` (the engine archiving the
   sources, no event-query), ``provenance`` (archiving + the overload event-query with
   Ananke provenance, no recall: the configuration the throughput target names) and ``full`` (archiving + Ananke provenance + the paper's
   queries with Recall and Similarity Recall); with ``--own`` also ``full_own`` (the full
   engine with every source archived by a query of its own, against the shared read);
   with ``--polynomials`` also ``full_nopoly`` (the full engine with
   ``ananke.polynomials: false``): full / full_nopoly in each round is the live-path
   overhead of how-provenance polynomials through the whole engine (H 4; target >= 0.9x
   in every round; ``bench/provenance/poly_overhead.py`` measures the event-query path
   alone).
   Rows/s = source rows / wall seconds from
   start until every query has committed the ``until`` offset. After a discarded hour of
   plain Spark and one discarded run of each engine configuration (so no measured run
   compiles its configuration's paths), each
   config runs ``--rounds`` times (4), interleaved, each round in another order
   (:func:`bench.harness.run_orders`, so no configuration always runs on a JVM warmed by
   the others); the median run of each is reported, and the ratios of each round beside
   it. Targets: provenance, and full, >= 70 % of plain in every round.
3. **Memory**: every few seconds of the latency run, driver RSS, the JVM child's RSS, the
   present tier's in-memory rows/bytes and open recall tasks; growth is last vs. the
   first sample after warm-up (a third of the run). Target <= 10 %.

Run: ``python -m bench engine_e2e [--quick] [--soak MINUTES] [--own] [--polynomials]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psutil
import yaml

from archive.pg import ENV_DSN, embedded_dsn
from bench.cpu_share import CpuShare
from bench.engine._alert_clock import progress_t
from bench.harness import ROOT, exit_code, percentile, publish, run_orders, spread_note, target, verdict
from moirae.config import SparkSettings
from moirae.runtime.graceful_stop import stop_between_batches
from recall.api import Output, OutputKind

MEASURES = (  # the code this benchmark measures (bench.harness.staleness)
    "bench/engine/engine_e2e.py", "bench/engine/_alert_clock.py", "bench/cpu_share.py", "moirae", "archive",
    "recall", "scheduler", "similarity", "ananke",
)

STOP_GRACE_S = SparkSettings().stop_grace.total_seconds()  # plain Spark's queries stop as the engine's do
EVENT_CONFIGS = ("provenance", "full", "full_own", "full_nopoly")  # the throughput configs that run the event-query
OPEN_STATES = {"runnable", "running", "suspended", "ending"}
WORDS = {True: "met", False: "missed", None: "unresolved"}


def pct(xs: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``xs`` (:func:`bench.harness.percentile`) to
    the millisecond, None for none."""
    p = percentile(xs, q)
    return None if p is None else round(p, 3)


def stats(xs: list[float]) -> dict:
    return {"count": len(xs), "median_s": pct(xs, 50), "p90_s": pct(xs, 90),
            "max_s": round(max(xs), 3) if xs else None, "min_s": round(min(xs), 3) if xs else None}


def scenario_file(tmp: Path, days: int, servers: int, speedup: float) -> Path:
    raw = yaml.safe_load((ROOT / "config" / "scenarios" / "cluster.yaml").read_text())
    raw["history_days"] = days
    raw["servers"] = servers
    raw["live"]["speedup"] = speedup
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.dsn = os.environ.get(ENV_DSN) or embedded_dsn(ROOT / ".moirae-bench")
        self.schemas: list[str] = []

    def engine(self, tag: str, **overrides):
        from moirae import Engine

        schema = f"e2e_{tag}_{uuid.uuid4().hex[:8]}"
        self.schemas.append(schema)
        return Engine.from_config(None, data_dir=str(self.tmp / schema), postgres={"dsn": self.dsn, "schema": schema},
                                  **overrides)

    def drop_schemas(self) -> None:
        """Drop every schema this bench made so far (and forget them)."""
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while self.schemas:
                    for attempt in range(10):
                        try:
                            cur.execute(f'DROP SCHEMA IF EXISTS "{self.schemas[-1]}" CASCADE')
                            break
                        except psycopg2.errors.DeadlockDetected:
                            # a Python worker of a stopped query may still be finishing its
                            # partition's COPY into the schema (its task was killed, its
                            # worker not): the DROP lost; the writer ends, then it goes through
                            if attempt == 9:
                                raise
                            time.sleep(1.0)
                    self.schemas.pop()
        finally:
            conn.close()


# -- 1 + 3: latency and memory over one live run -----------------------------------------


class BusTimes:
    """Stamps alerts and their first norm / similar outputs as seen on the bus."""

    def __init__(self, engine) -> None:
        self.sub = engine.deploy.manager.bus.subscribe(maxsize=1_000_000)
        self.alert: dict[str, float] = {}
        self.first: dict[str, dict[str, float]] = {"norm": {}, "similar": {}}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            item = self.sub.get(timeout=0.2)
            if item is None:
                continue
            now = time.monotonic()
            if isinstance(item, dict) and item.get("type") == "event":
                self.alert.setdefault(item["eid"], now)
            elif (isinstance(item, Output) and item.kind is not OutputKind.BOUNDARY and item.key != "__status__"
                  and item.operator in self.first):
                self.first[item.operator].setdefault(item.eid, now)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self.sub.close()

    def latencies(self, op: str) -> list[float]:
        return [self.first[op][e] - t for e, t in self.alert.items() if e in self.first[op]]


def jvm_rss(me: psutil.Process) -> int | None:
    for child in me.children(recursive=True):
        try:
            if "java" in child.name():
                return child.memory_info().rss
        except psutil.Error:
            continue
    return None


def batch_times(engine) -> dict:
    """Per live streaming query, its recent batches' ``triggerExecution`` times (ms): a
    batch longer than the trigger delays every window that closes during it."""
    queries = [s.query for s in engine.sources.by_name.values() if s.query is not None] + [f.streaming for f in engine.deploy.flows.values()]
    out = {}
    for q in queries:
        if q is None:
            continue
        dur = [p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress if p.get("durationMs")]
        out[q.name or str(q.id)] = {"batches": len(dur), "median": pct(dur, 50), "p90": pct(dur, 90),
                                    "max": max(dur, default=None)}
    return out


def live_run(b: Bench, path: Path, minutes: float, sample_s: float, trigger_s: float | None = None) -> dict:
    from datetime import timedelta

    from bench.engine._alert_clock import AlertClock
    from moirae.api.server import serve
    from moirae.scenarios import cluster
    from moirae.sources.cluster_config import load_cluster_config

    engine = b.engine("live", **({"spark": {"trigger": f"{int(trigger_s * 1000)}ms"}} if trigger_s else {}))
    trigger = engine.settings.spark.trigger.total_seconds()
    t0 = time.monotonic()
    info = cluster.deploy(engine, progress=False, scenario_file=path)
    setup_s = time.monotonic() - t0
    bus = BusTimes(engine)
    me = psutil.Process()
    samples = []
    cfg = load_cluster_config(path)
    clock = server = None
    try:
        engine.start()
        live_start = time.time()
        server = serve(engine, port=0)
        clock = AlertClock(server.url, engine.deploy.flows["overload"].streaming, float(cfg.live.speedup),
                           timedelta(minutes=1), since=datetime.fromtimestamp(cfg.history_end_ns / 1e9, UTC).isoformat())
        start = time.monotonic()
        end = start + minutes * 60
        while time.monotonic() < end:
            engine.run_for(min(sample_s, max(0.0, end - time.monotonic())))
            tasks = engine.deploy.manager.tasks()
            samples.append({
                "t_s": round(time.monotonic() - start, 1), "driver_rss_mb": me.memory_info().rss / 2**20,
                "jvm_rss_mb": (jvm_rss(me) or 0) / 2**20, "present_rows": engine.archiver.present.rows(),
                "present_mb": engine.archiver.present.bytes() / 2**20,
                "open_tasks": sum(1 for t in tasks if t.state.value in OPEN_STATES
                                  and not t.operator.startswith("replica_")),
                "open_by": dict(Counter(f"{t.operator}:{t.state.value}" for t in tasks
                                        if t.state.value in OPEN_STATES and not t.operator.startswith("replica_"))),
                "alerts": len(bus.alert)})
        batches = batch_times(engine)
        status = engine.live_status()
        clock.stop()
        engine.stop()
    finally:
        bus.stop()
        if clock is not None:
            clock.stop()
        if server is not None:
            server.stop()
        engine.close()
    api = clock.latencies()
    warmup_s = min(WARMUP_S, minutes * 60 / 3)
    steady = clock.latencies(closed_after=live_start + warmup_s)
    warm = [s for s in samples if s["t_s"] >= minutes * 60 / 3] or samples
    mem = {}
    for key in ("driver_rss_mb", "jvm_rss_mb", "present_mb"):
        pct_, before, after = memory_growth(warm, lambda x, k=key: x[k])
        mem[key] = {"after_warmup": round(warm[0][key], 1), "end": round(warm[-1][key], 1),
                    "peak": round(max(s[key] for s in samples), 1), "median_first_half": round(before, 1),
                    "median_second_half": round(after, 1), "growth_pct": pct_}
    total = memory_growth(warm, lambda x: x["driver_rss_mb"] + x["jvm_rss_mb"])
    mem["total_rss_mb"] = {"median_first_half": round(total[1], 1), "median_second_half": round(total[2], 1),
                           "growth_pct": total[0]}
    waits_all = clock.tick_waits()
    engine_lat = list(engine.deploy.alert_latencies)
    norm, similar = bus.latencies("norm"), bus.latencies("similar")
    target = 2 * trigger + 0.2
    waits = status["archive_waits"]
    return {"minutes": minutes, "trigger_s": trigger, "setup_s": round(setup_s, 1), "deploy": info,
            "window_close_to_api": {k: {**stats(v), "p99_s": pct(v, 99)} for k, v in api.items()},
            "window_close_to_api_steady": {k: {**stats(v), "p99_s": pct(v, 99)} for k, v in steady.items()},
            "warmup_s": warmup_s,
            "window_close_to_api_target_s": 2 * trigger + 0.5, "api_errors": clock.errors,
            "tick_wait_s": {**stats(waits_all), "p99_s": pct(waits_all, 99)},
            "tick_wait_steady_s": stats(clock.tick_waits(closed_after=live_start + warmup_s)),
            "speedup": float(cfg.live.speedup),
            "api_alerts": len(clock.seen), "archive_waits": waits, "batch_ms": batches,
            "event_query_phase_s": status["event_queries"], "event_worker": status["event_worker"],
            "alerts": len(bus.alert), "engine_detect_to_first_history": stats(engine_lat),
            "bus_alert_to_first_norm": stats(norm), "bus_alert_to_first_similar": stats(similar),
            "target_median_s": target,
            "meets_target": bool(engine_lat) and statistics.median(engine_lat) <= target,
            "latencies_s": {k: [round(x, 3) for x in v] for k, v in
                            (("engine", engine_lat), ("norm", norm), ("similar", similar),
                             *((f"api_{s}", x) for s, x in api.items()))},
            "memory": mem, "samples": [{k: round(v, 2) if isinstance(v, float) else v for k, v in s.items()}
                                       for s in samples]}


WINDOW_S = 300.0  # the scenario event-query's tumbling window (5 minutes of scenario time)
WARMUP_S = 30.0  # events whose window closed this soon after the live start are the warm-up


def memory_growth(warm: list[dict], value) -> tuple[float | None, float, float]:
    """Growth (%) of a memory figure over the samples after warm-up: the median of their
    second half against the median of their first half, and those two medians. One
    sample against another swings by +-25 % here with no leak (the JVM grows its heap in
    steps and hands it back slowly); a leak moves the medians too.

    >>> memory_growth([{"v": x} for x in (100, 150, 100, 100, 110, 105)], lambda s: s["v"])
    (5.0, 100, 105)
    """
    half = max(1, len(warm) // 2)
    before = statistics.median(value(x) for x in warm[:half])
    after = statistics.median(value(x) for x in warm[half:] or warm[-1:])
    return (round(100 * (after - before) / before, 1) if before else None), before, after


# -- 2: throughput ----------------------------------------------------------------------


def where_time_goes(queries) -> dict:
    """Per query: batches and summed milliseconds of Spark's progress phases (addBatch is
    the sink: archiving, provenance, events; latestOffset/getBatch the Python source)."""
    out = {}
    for q in queries:
        phases: dict[str, int] = {"batches": 0}
        for p in q.recentProgress:
            if not p.get("numInputRows"):
                continue
            phases["batches"] += 1
            for k, v in (p.get("durationMs") or {}).items():
                phases[k] = phases.get(k, 0) + int(v)
        out[q.name] = phases
    return out


def retry(fn, what: str, attempts: int = 6):
    """``fn()``, again when a Python data source worker missed Spark's connect-back
    timeout (a loaded machine); any other failure is raised."""
    for attempt in range(attempts):
        try:
            return fn()
        except RuntimeError as exc:
            if "connect back" not in str(exc) or attempt == attempts - 1:
                raise
            print(f"{what}: attempt {attempt + 1} failed ({str(exc)[:120]}), retrying", flush=True)
    raise AssertionError("unreachable")


def wait_done(queries, until_ns: int, timeout: float, poll: float = 0.5, check_every: int = 4) -> float:
    """The wall time (epoch seconds) at which the last of ``queries`` finished the
    micro-batch that took its source to ``until_ns``: that batch's trigger start plus its
    ``triggerExecution``, from Spark's progress (:func:`finished_at`). So neither the
    poll's period nor its py4j calls enter the figure: a fast poll holds the driver's GIL,
    taken from the engine's own threads (each poll is a py4j call and a JSON parse per
    query; a failed query is looked for every ``check_every`` polls, and at the end)."""
    start = time.monotonic()
    pending = list(queries)
    polls = 0
    while pending:
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"throughput run not done in {timeout}s: "
                               f"{[(q.name, progress_t(q.lastProgress or {})) for q in pending]}")
        if polls % check_every == 0:
            _raise_failed(pending)
        polls += 1
        pending = [q for q in pending if (progress_t(q.lastProgress or {}) or -1) < until_ns]
        if pending:
            time.sleep(poll)
    _raise_failed(queries)
    return max(finished_at(q.recentProgress, until_ns, q.name) for q in queries)


def _raise_failed(queries) -> None:
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")


def finished_at(progresses: list[dict], until_ns: int, name: str = "query") -> float:
    """When the first micro-batch whose source reached ``until_ns`` ended (epoch s).

    >>> finished_at([{"timestamp": "2026-11-27T05:00:00.000Z", "durationMs": {"triggerExecution": 400},
    ...               "sources": [{"endOffset": {"t": 5}}]},
    ...              {"timestamp": "2026-11-27T05:00:01.000Z", "durationMs": {"triggerExecution": 250},
    ...               "sources": [{"endOffset": '{"t": 9}'}]}], 8) - 1795755600
    1.25
    """
    for p in progresses:
        t = progress_t(p)
        if t is not None and t >= until_ns:
            begun = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
            return begun + p["durationMs"]["triggerExecution"] / 1000
    raise RuntimeError(f"{name}: no recent progress reached {until_ns} (the progress history rolled over?)")


def throughput(b: Bench, path: Path, live_hours: float, span_s: int, trigger: str, rounds: int = 4,
               own: bool = False, polynomials: bool = False) -> dict:
    from ananke.query import ProvQuery
    from moirae.runtime.spark import spark_session
    from moirae.scenarios.cluster import deploy as deploy_scenario
    from moirae.scenarios.cluster import register_sources
    from moirae.scenarios.queries import overload_query
    from moirae.sources.cluster import STREAMS, ClusterScenario
    from moirae.sources.cluster_config import load_cluster_config
    from moirae.sources.spark_cluster import FORMAT, register_cluster_source

    cfg = load_cluster_config(path)
    start_ns = cfg.history_end_ns
    until_ns = start_ns + int(live_hours * 3600e9)
    until = datetime.fromtimestamp(until_ns / 1e9, UTC).isoformat()

    def source(spark, stream, until):
        return (spark.readStream.format(FORMAT).option("config", str(path)).option("stream", stream)
                .option("speedup", "max").option("until", until).option("maxSpanSeconds", str(span_s)).load()
                .drop("ingest_ts"))

    scenario = ClusterScenario(cfg)
    g0 = time.monotonic()
    rows = sum(len(f) for f in scenario.frames(start_ns, until_ns).values())
    gen_s = time.monotonic() - g0
    out: dict = {"live_hours": live_hours, "batch_span_s": span_s, "trigger": trigger, "rows": rows,
                 "pandas_generation_s": round(gen_s, 2), "configs": {}}
    overrides = {"spark": {"trigger": trigger}}
    spark_trigger = f"{int(float(trigger.removesuffix('ms')))} milliseconds"

    def plain(until_iso: str, end_ns: int, one_by_one: bool = False) -> float:
        e0 = b.engine("plain_cfg", **overrides)
        s = e0.settings.spark
        spark = spark_session(s.master, "moirae", s.ui, s.shuffle_partitions)
        e0.close()
        register_cluster_source(spark)
        pq = ProvQuery(enabled=False)
        ck = b.tmp / f"plain_{uuid.uuid4().hex[:6]}"
        t0 = time.time()  # wait_done returns the wall time the last batch ended
        share = CpuShare().start()
        queries = []
        for stream in STREAMS:
            df = source(spark, stream, until_iso).withWatermark("ts", "1 minute")
            if stream == "metrics":
                inp = pq.source(df, "metrics", "ts", cols=["sid", "cpu", "mem", "bw"])
                df = overload_query(cfg.metrics.bw_threshold_mbps)(inp).sink("overload").df
            queries.append(df.writeStream.queryName(f"plain_{stream}").format("noop")
                           .option("checkpointLocation", str(ck / stream))
                           .trigger(processingTime=spark_trigger).start())
            while one_by_one and queries[-1].lastProgress is None and queries[-1].exception() is None:
                time.sleep(0.2)
        try:
            secs = wait_done(queries, end_ns, 1800) - t0
            extra["cpu"] = share.stop()
            phases.update(where_time_goes(queries))
            return secs
        finally:
            for q in queries:  # as Engine.stop: a query stopped mid-batch makes Spark log errors
                stop_between_batches(q, STOP_GRACE_S)

    def engine_config(config: str):
        # full_own: the full engine with every source archived by a query of its own (the
        # metrics source read twice), against full's shared read (archive.shared)
        own = {"archive": {"shared_read": False}} if config == "full_own" else {}
        if config == "full_nopoly":  # the full engine without how-provenance polynomials
            own = {"ananke": {**overrides.get("ananke", {}), "polynomials": False}}
        engine = b.engine(config, **{k: v for k, v in overrides.items() if k not in own}, **own)
        live = {"speedup": "max", "until": until, "maxSpanSeconds": str(span_s)}
        if config in ("full", "full_own", "full_nopoly"):
            # as `moirae run --scenario cluster` deploys it: sources, queries, the history, the
            # past overloads re-materialized
            deploy_scenario(engine, progress=False, scenario_file=path, live_options=live)
            # the loaded history's similarity indexes are built before the clock starts, as
            # in an engine that has run a while; those of chunks sealed during the run count
            if not engine.deploy.indexes.drain(timeout=600):
                raise RuntimeError("the history's similarity indexes were not built within 600 s")
        else:
            register_sources(engine, path, live)
        if config == "provenance":  # the target's configuration: archiving + the event-query with provenance
            engine.event_query("overload", overload_query(cfg.metrics.bw_threshold_mbps), inputs=["metrics"])
        built0 = engine.deploy.indexes.built
        t0 = time.time()  # wait_done returns the wall time the last batch ended
        share = CpuShare().start()
        engine.start()
        queries = [src.query for src in engine.sources.by_name.values() if src.query is not None]
        queries += [f.streaming for f in engine.deploy.flows.values()]
        try:
            secs = wait_done(queries, until_ns, 1800) - t0
            extra["cpu"] = share.stop()
            extra["flow_seconds"] = {n: f.timings() for n, f in engine.deploy.flows.items()} or None
            phases = where_time_goes(queries)
            extra["indexes_built"] = engine.deploy.indexes.built - built0
            events = sum(f.events_seen for f in engine.deploy.flows.values())
            tasks = len([t for t in engine.deploy.manager.tasks() if not t.operator.startswith("replica_")])
        finally:
            engine.close()
        flows = config in EVENT_CONFIGS
        return secs, events if flows else None, tasks if flows else None, phases

    phases: dict = {}  # plain's run's, filled in by plain()
    extra: dict = {}  # the current run's CPU by process class, and its event-flows' driver seconds by phase
    warm_ns = start_ns + 3600 * 10**9  # one discarded hour: JVM classes, Python workers
    for attempt in range(3):  # a cold Python worker may miss Spark's 10 s connect-back on a loaded machine
        try:
            plain(datetime.fromtimestamp(warm_ns / 1e9, UTC).isoformat(), warm_ns, one_by_one=True)
            break
        except RuntimeError as exc:
            print(f"warm-up attempt {attempt + 1} failed: {str(exc)[:200]}", flush=True)

    def one_run(config: str) -> dict:
        phases.clear()
        extra.clear()
        events = tasks = None
        if config == "plain":
            secs = retry(lambda: plain(until, until_ns), "throughput plain")
            run_phases = dict(phases)
        else:
            secs, events, tasks, run_phases = retry(lambda c=config: engine_config(c), f"throughput {config}")
        run = {"rows": rows, "seconds": round(secs, 2), "rows_per_s": round(rows / secs, 1), "phases_ms": run_phases,
               "cpu": extra.get("cpu"), "flow_seconds": extra.get("flow_seconds")}
        if config in EVENT_CONFIGS:
            run.update(events=events, recall_tasks=tasks, similarity_indexes_built=extra.get("indexes_built"))
        b.drop_schemas()  # each run on an archive of its own; none left to slow the next
        return run

    runs: dict[str, list[dict]] = {c: [] for c in ("plain", "archive", "provenance", "full", *(("full_own",) if own else ()),
                                                   *(("full_nopoly",) if polynomials else ()))}
    for config in list(runs)[1:]:  # each engine configuration once, discarded: the JIT compiles its own paths
        print(f"throughput warm-up {config}: {one_run(config)['seconds']:.1f}s", flush=True)
    # interleaved, so a slow spell of the shared machine hits every config alike, and in
    # balanced orders, so the JIT still speeding later runs up favours none
    for r, order in enumerate(run_orders(runs, rounds)):
        for config in order:
            runs[config].append(run := one_run(config))
            print(f"throughput round {r + 1} {config}: {rows} rows in {run['seconds']:.1f}s = "
                  f"{run['rows_per_s']:,.0f} rows/s", flush=True)
    out.update(summarize_rounds(runs))
    out["meets_target"] = throughput_verdict(out, "full")
    out["provenance_meets_target"] = throughput_verdict(out, "provenance")
    return out


def throughput_verdict(tp: dict, config: str) -> bool | None:
    """``config`` >= 0.7x plain Spark in every round (:func:`bench.harness.verdict`).

    >>> throughput_verdict({"provenance_over_plain": 0.706,
    ...                     "provenance_over_plain_by_round": [0.733, 0.689, 0.707, 0.716]}, "provenance") is None
    True
    >>> throughput_verdict({"full_over_plain": 0.58, "full_over_plain_by_round": [0.6, 0.57]}, "full")
    False
    """
    return verdict(_by_round(tp, config), 0.7)


def _by_round(tp: dict, config: str) -> list[float]:
    return tp.get(f"{config}_over_plain_by_round") or [tp[f"{config}_over_plain"]]


def summarize_rounds(runs: dict[str, list[dict]]) -> dict:
    """Each config's median run (by seconds) and the ratios of those medians, with the
    full/plain ratio of each round (the configs of one round ran one after another).

    >>> r = {c: [{"seconds": s, "rows_per_s": 100 / s} for s in secs]
    ...      for c, secs in (("plain", [10, 12, 11]), ("archive", [11, 11, 13]), ("full", [20, 16, 18]))}
    >>> out = summarize_rounds(r)
    >>> out["full_over_plain"], out["full_over_plain_by_round"], out["archive_over_plain"]
    (0.611, [0.5, 0.75, 0.611], 1.0)
    >>> "provenance_over_plain" in out
    False
    """
    def median_run(xs: list[dict]) -> dict:
        return sorted(xs, key=lambda x: x["seconds"])[(len(xs) - 1) // 2]

    configs = {c: median_run(xs) for c, xs in runs.items()}
    by_round = [round(f["rows_per_s"] / p["rows_per_s"], 3) for p, f in zip(runs["plain"], runs["full"], strict=True)]
    return {"rounds": len(runs["plain"]), "configs": configs,
            "seconds_by_round": {c: [x["seconds"] for x in xs] for c, xs in runs.items()},
            "full_over_plain": round(configs["full"]["rows_per_s"] / configs["plain"]["rows_per_s"], 3),
            "archive_over_plain": round(configs["archive"]["rows_per_s"] / configs["plain"]["rows_per_s"], 3),
            **({"provenance_over_plain": round(configs["provenance"]["rows_per_s"] / configs["plain"]["rows_per_s"], 3),
                "provenance_over_plain_by_round": [round(v["rows_per_s"] / p["rows_per_s"], 3) for p, v in
                                                   zip(runs["plain"], runs["provenance"], strict=True)],
                "full_over_provenance": round(configs["full"]["rows_per_s"] / configs["provenance"]["rows_per_s"], 3),
                "full_over_provenance_by_round": [round(f["rows_per_s"] / v["rows_per_s"], 3) for v, f in
                                                  zip(runs["provenance"], runs["full"], strict=True)]}
               if runs.get("provenance") else {}),
            "full_over_plain_by_round": by_round,
            **({"shared_over_own": round(configs["full"]["rows_per_s"] / configs["full_own"]["rows_per_s"], 3),
                "shared_over_own_by_round": [round(f["rows_per_s"] / o["rows_per_s"], 3)
                                             for f, o in zip(runs["full"], runs["full_own"], strict=True)]}
               if runs.get("full_own") else {}),
            **({"poly_on_over_off": round(configs["full"]["rows_per_s"] / configs["full_nopoly"]["rows_per_s"], 3),
                "poly_on_over_off_by_round": [round(f["rows_per_s"] / o["rows_per_s"], 3)
                                              for f, o in zip(runs["full"], runs["full_nopoly"], strict=True)]}
               if runs.get("full_nopoly") else {})}


# -- report -----------------------------------------------------------------------------


def figure(live: dict, tp: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for key, label in (("engine", "detect→first history (engine)"), ("norm", "alert→first norm (bus)"),
                       ("similar", "alert→first similar (bus)")):
        xs = live["latencies_s"][key]
        if xs:
            s = sorted(xs)
            ax[0].step(s, [(i + 1) / len(s) for i in range(len(s))], where="post", label=label)
    ax[0].axvline(live["target_median_s"], color="k", ls="--", lw=0.8, label="target (median)")
    ax[0].set(xlabel="seconds", ylabel="fraction of alerts", title="alert to first history")
    ax[0].legend(fontsize=7)
    names = list(tp["configs"])
    ax[1].bar(names, [tp["configs"][n]["rows_per_s"] for n in names],
              color=["grey", "tab:blue", "tab:green", "tab:orange", "tab:red"][:len(names)])
    ax[1].set(ylabel="source rows / s", title=f"live throughput (full/plain = {tp['full_over_plain']:.2f})")
    t = [s["t_s"] for s in live["samples"]]
    ax[2].plot(t, [s["driver_rss_mb"] for s in live["samples"]], label="driver RSS MB")
    ax[2].plot(t, [s["jvm_rss_mb"] for s in live["samples"]], label="JVM RSS MB")
    ax[2].plot(t, [s["present_mb"] for s in live["samples"]], label="present tier MB")
    ax2 = ax[2].twinx()
    ax2.plot(t, [s["open_tasks"] for s in live["samples"]], color="grey", ls=":", label="open tasks")
    ax2.set_ylabel("open recall tasks")
    ax[2].set(xlabel="seconds", ylabel="MB", title="memory soak")
    ax[2].legend(fontsize=7, loc="center left")
    fig.tight_layout()
    return fig


def phase_line(configs: dict) -> str:
    parts = []
    for name, c in configs.items():
        ph = c.get("phases_ms") or {}
        sink = sum(q.get("addBatch", 0) for q in ph.values())
        src = sum(q.get("latestOffset", 0) + q.get("getBatch", 0) for q in ph.values())
        parts.append(f"{name} {sink:,} / {src:,}")
    return "; ".join(parts)


def cpu_line(configs: dict) -> str:
    """Core-seconds each config's median run used, by process class, and how busy the
    machine was (a config whose cores were busy throughout is CPU-bound: only less work
    makes it faster).

    >>> cpu_line({"plain": {"cpu": {"seconds": 10.0, "cores": 2, "busy": 18.0, "jvm": 6.0, "postgres": 1.0,
    ...           "python_workers": 9.0, "driver": 1.5, "other": 0.5}}, "archive": {"cpu": None}})
    'plain 18.0 (JVM 6.0, Python workers 9.0, PostgreSQL 1.0, driver 1.5, other 0.5; 90 % busy)'
    """
    names = {"jvm": "JVM", "python_workers": "Python workers", "postgres": "PostgreSQL", "driver": "driver"}
    parts = []
    for name, c in configs.items():
        u = c.get("cpu")
        if not u:
            continue
        by = ", ".join(f"{names[k]} {u[k]:.1f}" for k in ("jvm", "python_workers", "postgres", "driver"))
        busy = u["busy"] / (u["seconds"] * u["cores"]) if u["seconds"] else 0.0
        parts.append(f"{name} {u['busy']:.1f} ({by}, other {u['other']:.1f}; {busy * 100:.0f} % busy)")
    return "; ".join(parts)


def flow_line(configs: dict) -> str:
    """The full engine's event-query, driver seconds by phase (its median run): collect is
    the batch's Spark job; contexts and events run on the event worker, beside the next batch.

    >>> flow_line({"full": {"flow_seconds": {"overload": {"collect": 9.5, "ank1": 0.6, "wait": 0.0}}}})
    'full: overload collect 9.5, ank1 0.6, wait 0'
    """
    parts = []
    for name, c in configs.items():
        for flow, secs in (c.get("flow_seconds") or {}).items():
            parts.append(f"{name}: {flow} " + ", ".join(f"{k} {v:g}" for k, v in secs.items()))
    return "; ".join(parts)


def api_table(live: dict) -> str:
    steady = live.get("window_close_to_api_steady")
    head = "| window close → API shows | count | median s | p99 s | max s |"
    if steady:
        head += f" after {live.get('warmup_s', 0):g} s warm-up: count | median s | p99 s | max s |"
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for key, label in (("event", "(a) the event"), ("context", "(b) its context"),
                       ("recall", "(c) its first Recall (`norm`) output"),
                       ("similar", "(d) its first similar past incident")):
        x = live["window_close_to_api"][key]
        row = f"| {label} | {x['count']} | {x['median_s']} | {x['p99_s']} | {x['max_s']} |"
        if steady:
            y = steady[key]
            row += f" {y['count']} | {y['median_s']} | {y['p99_s']} | {y['max_s']} |"
        rows.append(row)
    return "\n".join(rows)


def tick_note(live: dict, d: dict) -> str:
    """What the (d) median holds besides the wait for the trigger tick: the target allows
    a whole trigger for that wait, so it is met at every point of the tick only when the
    rest fits in one trigger + 500 ms."""
    w = live.get("tick_wait_steady_s") or {}
    if w.get("median_s") is None or d.get("median_s") is None:
        return ""
    rest = round(d["median_s"] - w["median_s"], 3)
    trig = live["trigger_s"]
    return (f"{w['median_s']} s of it was the wait for the trigger tick, fixed by where the windows closed in that "
            f"run; the rest, {rest} s, {'fits' if rest <= trig + 0.5 else 'does not fit'} in 1 trigger + 500 ms "
            f"({trig + 0.5:g} s), so with the worst tick wait (1 trigger) the median would be about "
            f"{round(rest + trig, 2)} s")


def tick_line(live: dict) -> str:
    """The part of the latency that is the wait for the event-query's next trigger tick."""
    w = live.get("tick_wait_steady_s") or live.get("tick_wait_s")
    if not w or not w.get("count"):
        return ""
    line = (f"Of these, the wait from the window's close to the event-query's next trigger tick (no engine work "
            f"shortens it) was {w['median_s']} s median ({w['min_s']}-{w['max_s']} s, after the warm-up).")
    speedup, trig = live.get("speedup"), live["trigger_s"]
    if speedup:
        per = WINDOW_S / speedup / trig  # triggers per 5-minute window, in wall time
        line += (f" At {speedup:g}x a 5-minute window lasts {per:g} trigger(s) of {trig:g} s"
                 + (", a whole number, so every window closes at the same point of the tick and this wait is fixed "
                    f"within a run and differs between runs (0-{trig:g} s)." if abs(per - round(per)) < 1e-9
                    else ", so windows close at changing points of the tick."))
    return line + " What the engine adds comes after that tick."


def prov_row(tp: dict) -> str:
    """The table row of the target's configuration: archiving + the event-query with provenance."""
    v = tp["configs"].get("provenance")
    if v is None:
        return ""
    return (f"| + event-query with provenance (ANK-1), no recall | {v['rows']} | {v['seconds']} | "
            f"{v['rows_per_s']:,.0f} | {tp['provenance_over_plain']:.2f} |\n")


def prov_target_line(tp: dict) -> str:
    """The provenance throughput target, on its configuration, if it ran."""
    if "provenance_over_plain" not in tp:
        return ""
    by = ", ".join(f"{x:.2f}" for x in tp["provenance_over_plain_by_round"])
    full = tp["configs"]["full"]
    rate = f" ({full['events'] / full['seconds']:.1f} a second here)" if full.get("events") else ""
    return (f"Target archiving + provenance >= 0.70 x plain: "
            f"**{WORDS[throughput_verdict(tp, 'provenance')]}** (by round: {by}; met only when every round is). "
            f"The full engine also runs recall, context-queries and similarity for every alert{rate} "
            "on the same cores; it is held to the same 0.70 x.\n")


VARIANT_ROWS = {"full_own": "full engine, each source archived by its own query (`archive.shared_read: false`)",
                "full_nopoly": "full engine without polynomials (`ananke.polynomials: false`)"}


def variant_rows(tp: dict) -> str:
    """The table rows of the full engine's variants that ran (:data:`VARIANT_ROWS`)."""
    p = tp["configs"]["plain"]
    return "".join(f"| {label} | {o['rows']} | {o['seconds']} | {o['rows_per_s']:,.0f} | "
                   f"{o['rows_per_s'] / p['rows_per_s']:.2f} |\n"
                   for c, label in VARIANT_ROWS.items() if (o := tp["configs"].get(c)) is not None)


def rounds_line(tp: dict) -> str:
    """How many times each config ran, and the spread of full/plain over the rounds."""
    n = tp.get("rounds", 1)
    if n < 2:
        return "each config ran once"
    by = tp["full_over_plain_by_round"]
    return (f"each config ran {n} times, interleaved; the table shows each one's median run; full/plain by round: "
            f"{', '.join(f'{x:.2f}' for x in by)}")


def markdown(live: dict, tp: dict, quick: bool) -> str:
    e, n, s = (live["engine_detect_to_first_history"], live["bus_alert_to_first_norm"],
               live["bus_alert_to_first_similar"])
    c = tp["configs"]
    m = live["memory"]
    return f"""## Engine end to end (`bench/engine/engine_e2e.py`{' --quick' if quick else ''})

Cluster scenario ({live['deploy'].get('history_rows_loaded')} history rows, live at 300x) for
{live['minutes']:g} min, trigger {live['trigger_s']:g} s; {live['alerts']} alerts.

| alert → | count | median s | p90 s | max s |
|---|---|---|---|---|
| first history (engine: detection → first recall output) | {e['count']} | {e['median_s']} | {e['p90_s']} | {e['max_s']} |
| first `norm` output (bus) | {n['count']} | {n['median_s']} | {n['p90_s']} | {n['max_s']} |
| first similar past event (bus) | {s['count']} | {s['median_s']} | {s['p90_s']} | {s['max_s']} |

Target median <= 2 triggers + 200 ms = {live['target_median_s']:.1f} s: **{'met' if live['meets_target'] else 'missed'}**.
These figures start when the engine (or the bus) first sees the alert, after Spark emitted it.

Measured as a user sees it: from the instant the event's window closed under the watermark
(the earliest Spark could emit it; see `bench/engine/_alert_clock.py`) to the HTTP API showing, in turn
(polled every 100 ms; {live['api_alerts']} alerts, {live['api_errors']} failed polls):

{api_table(live)}

Target (d) <= 2 triggers + 500 ms = {live['window_close_to_api_target_s']:.1f} s (median).
{tick_line(live)}
Archive waits before contexts: {live['archive_waits']['count']} waits, {live['archive_waits']['timed_out']} timed out
({live['archive_waits']['timeouts_by_stream']}), {live['archive_waits']['caught_up_idle']} sparse inputs found caught up,
{live['archive_waits']['seconds']} s waited in all.

Throughput ({tp['live_hours']:g} h of live scenario, all four streams, `speedup=max`, trigger {tp['trigger']};
{rounds_line(tp)}):

| config | rows | seconds | rows/s | vs plain |
|---|---|---|---|---|
| plain Spark (event-query, noop sink) | {c['plain']['rows']} | {c['plain']['seconds']} | {c['plain']['rows_per_s']:,.0f} | 1.00 |
| + archiving | {c['archive']['rows']} | {c['archive']['seconds']} | {c['archive']['rows_per_s']:,.0f} | {tp['archive_over_plain']:.2f} |
{prov_row(tp)}| full engine (archive + provenance + recall) | {c['full']['rows']} | {c['full']['seconds']} | {c['full']['rows_per_s']:,.0f} | {tp['full_over_plain']:.2f} |
{variant_rows(tp)}
{prov_target_line(tp)}Target full >= 0.70 x plain: **{WORDS[throughput_verdict(tp, 'full')]}** (by round: {', '.join(f'{x:.2f}' for x in _by_round(tp, 'full'))}). Generating the same rows
in pandas alone takes {tp['pandas_generation_s']} s (the source regenerates them in Spark's Python workers).
Where time goes (Spark progress, ms summed over the queries: sink `addBatch` / source `latestOffset`+`getBatch`):
{phase_line(c)}.
CPU core-seconds over each median run, by process: {cpu_line(c) or 'not measured'}.
Event-query driver seconds by phase: {flow_line(c) or 'not measured'}.

Memory over the live run (growth = median of the second half of the samples after a third of the run vs.
the median of the first half; target <= 10 %; the endpoints are shown):
driver RSS {m['driver_rss_mb']['after_warmup']} → {m['driver_rss_mb']['end']} MB ({m['driver_rss_mb']['growth_pct']} %,
peak {m['driver_rss_mb']['peak']}); JVM RSS {m['jvm_rss_mb']['after_warmup']} → {m['jvm_rss_mb']['end']} MB
({m['jvm_rss_mb']['growth_pct']} %, peak {m['jvm_rss_mb']['peak']}); present tier peak {m['present_mb']['peak']} MB;
open recall tasks peak {max((x['open_tasks'] for x in live['samples']), default=0)}.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--soak", type=float, default=None, help="minutes of the live run (default 10; quick 1)")
    ap.add_argument("--live-hours", type=float, default=None, help="scenario hours of the throughput span")
    ap.add_argument("--rounds", type=int, default=None,
                    help="runs of each throughput config, interleaved (default 4, one cycle of "
                         "bench.harness.run_orders for the four configs (five, an odd number, with --own: give 10); quick 1)")
    ap.add_argument("--own", action="store_true",
                    help="also run the full engine with every source archived by a query of its own "
                         "(archive.shared_read: false), against the shared read")
    ap.add_argument("--polynomials", action="store_true",
                    help="also run the full engine without how-provenance polynomials (ananke.polynomials: "
                         "false), against full: their live-path overhead (with the five configs, give 10 rounds)")
    ap.add_argument("--latency-only", action="store_true",
                    help="run only the live run (latency, memory) and print it; nothing is published")
    ap.add_argument("--trigger", type=float, default=None,
                    help="the live run's trigger interval in seconds (default: the engine's configured one)")
    args = ap.parse_args(argv)
    quick = args.quick
    minutes = args.soak if args.soak is not None else (1.0 if quick else 10.0)
    live_hours = args.live_hours or (6.0 if quick else 48.0)
    from moirae.runtime.spark import spark_session

    # A longer auth-socket timeout for Python workers on a loaded machine. Spark's own
    # worker connect-back wait (fixed, ~10 s) is not configurable: `retry` handles it.
    spark_session(extra={"spark.python.authenticate.socketTimeout": "120s"})
    with tempfile.TemporaryDirectory(prefix="moirae-e2e-") as d:
        tmp = Path(d)
        b = Bench(tmp)
        try:
            path = scenario_file(tmp, days=1 if quick else 3, servers=4 if quick else 8, speedup=300)
            tp = None if args.latency_only else throughput(b, path, live_hours, span_s=3600 if quick else 3 * 3600,
                                                           trigger="100ms", rounds=args.rounds or (1 if quick else 4),
                                                           own=args.own, polynomials=args.polynomials)
            live = retry(lambda: live_run(b, path, minutes, sample_s=2.0 if quick else 5.0,
                                                   trigger_s=args.trigger), "live run")
        finally:
            b.drop_schemas()
    print(json.dumps({**{k: v for k, v in live.items() if k != "samples"},
                      "open_tasks_by_state": [(x["t_s"], x["open_by"]) for x in live["samples"][::6]]},
                     indent=1, default=str), flush=True)
    if tp is None:
        return 0
    fig = None
    data = {"quick": quick, "latency_and_memory": live, "throughput": tp}
    try:
        fig = figure(live, tp)
    except Exception as exc:  # the figure is optional; the figures are in the JSON
        print(f"no figure: {exc}")
    publish("engine_e2e_quick" if quick else "engine_e2e", data, markdown(live, tp, quick), fig,
            targets=targets(data))
    return exit_code(targets(data))


def targets(data: dict) -> list[dict]:
    """Alert to first history <= 2 triggers + 200 ms; full engine >= 0.7x plain
    Spark; memory soak growth <= 10 % over 10 minutes."""
    live, tp = data["latency_and_memory"], data["throughput"]
    lat = live["engine_detect_to_first_history"]["median_s"]
    mem = live["memory"]
    total = mem.get("total_rss_mb")  # the driver is Python + its JVM
    if total is not None:
        first, last, growth = total["median_first_half"], total["median_second_half"], total["growth_pct"]
    else:  # a result written before the medians
        first = mem["driver_rss_mb"]["after_warmup"] + mem["jvm_rss_mb"]["after_warmup"]
        last = mem["driver_rss_mb"]["end"] + mem["jvm_rss_mb"]["end"]
        growth = round(100 * (last - first) / first, 1)
    short = live["minutes"] < 10
    whole = live["window_close_to_api"]["similar"]
    d = live.get("window_close_to_api_steady", {}).get("similar", whole)
    goal = live["window_close_to_api_target_s"]
    return [target("alert latency: window close to first similar past incident in the API (scenario, after "
                   f"{live.get('warmup_s', 0):g} s warm-up)",
                   f"<= {goal:g} s median", f"{d['median_s']} s median, {d['p99_s']} s p99 ({d['count']} alerts; "
                   f"with the warm-up: {whole['median_s']} s median, {whole['p99_s']} s p99, {whole['count']} alerts)",
                   d["median_s"] is not None and d["median_s"] <= goal, tick_note(live, d)),
            target("alert to first history, from detection (engine's own clock)", f"<= {live['target_median_s']} s median",
                   f"{lat} s", bool(live["meets_target"])),
            *([target("live throughput, archiving + event-query with provenance vs plain Spark ("
                      "scenario's Python source)", ">= 0.7x", f"{tp['provenance_over_plain']:.2f}x (by round: "
                      f"{', '.join(f'{x:.2f}' for x in tp['provenance_over_plain_by_round'])})",
                      throughput_verdict(tp, "provenance"), spread_note(_by_round(tp, "provenance"), 0.7))]
              if "provenance_over_plain" in tp else []),
            target("live throughput, full engine vs plain Spark (scenario's Python source)", ">= 0.7x",
                   f"{tp['full_over_plain']:.2f}x (by round: {', '.join(f'{x:.2f}' for x in _by_round(tp, 'full'))})",
                   throughput_verdict(tp, "full"), spread_note(_by_round(tp, "full"), 0.7)),
            *([target("live throughput, full engine vs archiving + event-query with provenance (the live path "
                      "the history work is added to), scenario's Python source", "reported",
                      f"{tp['full_over_provenance']:.2f}x (by round: "
                      f"{', '.join(f'{x:.2f}' for x in tp['full_over_provenance_by_round'])})", None,
                      "what Recall, context-queries, Similarity Recall and incidents cost on top of the live path, "
                      "same rounds; the full engine does all the live path does, so its ratio to plain Spark "
                      "is at most the live path's")]
              if "full_over_provenance" in tp else []),
            *([target("live throughput, full engine: sources read once by their event-query (archive.shared_read) "
                      "vs each archived by a query of its own", "reported", f"{tp['shared_over_own']:.2f}x (by round: "
                      f"{', '.join(f'{x:.2f}' for x in tp['shared_over_own_by_round'])})", None,
                      "the same run, interleaved; on this shared machine a round's ratios move by 0.1-0.2")]
              if "shared_over_own" in tp else []),
            *([target("live throughput, full engine with how-provenance polynomials vs without "
                      "(ananke.polynomials), scenario's Python source", ">= 0.9x",
                      f"{tp['poly_on_over_off']:.2f}x (by round: "
                      f"{', '.join(f'{x:.2f}' for x in tp['poly_on_over_off_by_round'])})",
                      verdict(tp["poly_on_over_off_by_round"], 0.9),
                      spread_note(tp["poly_on_over_off_by_round"], 0.9))]
              if "poly_on_over_off" in tp else []),
            target(f"memory soak, driver RSS (Python + JVM) growth after warm-up ({live['minutes']:g} min)",
                   "<= 10 % over 10 min", f"{growth:+.1f} % (median {first:,.0f} -> {last:,.0f} MB, halves after warm-up; Python "
                   f"{mem['driver_rss_mb']['growth_pct']:+.1f} %, JVM {mem['jvm_rss_mb']['growth_pct']:+.1f} %)",
                   None if short and growth <= 10 else growth <= 10,
                   "shorter than the 10 minutes the target is stated for" if short else "")]



def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data["latency_and_memory"], data["throughput"], data.get("quick", False))

if __name__ == "__main__":
    raise SystemExit(main())
