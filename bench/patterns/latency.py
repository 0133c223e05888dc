"""Pattern latency: how soon a match is an event in the API once the watermark has passed
its last row (``moirae/patterns/spark_processor.py``, ``Engine.pattern_query``).

One engine, one file source (CSV files written once a trigger, event time = wall time),
``--keys`` keys each sending one row a trigger whose value cycles 1, 2, 0, and the pattern
``PATTERN (A B) DEFINE A AS x = 1, B AS x = 2`` (a match final at its last row). For each
match: the wall time of the start of the first micro-batch whose watermark is at or past
the match's last row (the query's progress reports), and the first time its event id is
listed by the engine's event log (what the API reads, polled every 50 ms). The latency,
in triggers, is their difference over the trigger interval.

Target (issue "pattern event-queries"): median and p99 at most 2 triggers. Baseline: none
is meaningful for an absolute bound; the trigger interval is the unit.

Run: ``python -m bench latency [--quick]`` (published as ``latency_quick`` when quick).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

from bench.harness import exit_code, percentile, publish, target

MEASURES = ("bench/patterns/latency.py", "moirae/patterns", "moirae/engine/pattern_methods.py", "moirae/ingest/live.py")

GOAL_TRIGGERS = 2.0
TRIGGER_S = 1.0
SQL = """SELECT * FROM lat_in MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
  MEASURES LAST(B.x) AS bx PATTERN (A B) WITHIN INTERVAL '1' MINUTE DEFINE A AS x = 1, B AS x = 2)"""


def feed(folder: Path, keys: int, stop: threading.Event, sent: list) -> None:
    i = 0
    while not stop.is_set():
        now = pd.Timestamp.now(tz="UTC").floor("ms")
        rows = pd.DataFrame({"ts": [now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")] * keys,
                             "k": [f"k{j}" for j in range(keys)], "x": [float(i % 3)] * keys})
        tmp = folder / f".f{i:06d}.csv"
        rows.to_csv(tmp, index=False, header=False)
        tmp.rename(folder / f"f{i:06d}.csv")
        sent.append(now)
        i += 1
        stop.wait(TRIGGER_S)


def main(argv: list[str] | None = None) -> int:
    from bench.engine.engine_e2e import Bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--keys", type=int, default=20)
    args = ap.parse_args(argv)
    seconds = args.seconds or (45.0 if args.quick else 180.0)
    name = "latency_quick" if args.quick else "latency"
    tmp = Path(tempfile.mkdtemp(prefix="moirae-bench-patlat-"))
    inbox = tmp / "in"
    inbox.mkdir()
    b = Bench(tmp)
    engine = b.engine("patlat", spark={"trigger": f"{int(TRIGGER_S * 1000)}ms"},
                      archive={"chunk_span": "10m", "chunk_target_rows": 0})
    progress: dict[int, tuple[float, pd.Timestamp | None]] = {}
    durations: dict[int, tuple] = {}  # batch -> (input rows, Spark's phase times in ms)
    seen: dict[str, float] = {}
    stop = threading.Event()
    sent: list = []
    try:
        df = engine.spark.readStream.schema("ts timestamp, k string, x double").csv(str(inbox))
        engine.source("lat_in", df, ts="ts", lateness="1 second")
        engine.pattern_query("lat", SQL)
        engine.start()
        ready = time.time() + 300  # the pattern query's first micro-batch (Spark's start), off the clock
        while time.time() < ready and engine.deploy.flows["lat"].streaming.lastProgress is None:
            time.sleep(0.2)
        feeder = threading.Thread(target=feed, args=(inbox, args.keys, stop, sent), daemon=True)
        feeder.start()
        t_end = time.time() + seconds
        while time.time() < t_end + 10 * TRIGGER_S + 20:  # the last rows' watermark, then their batches
            if time.time() > t_end:
                stop.set()
            q = engine.deploy.flows["lat"].streaming
            for p in (q.recentProgress if q is not None else []):
                wm = (p.get("eventTime") or {}).get("watermark")
                progress.setdefault(int(p["batchId"]), (pd.Timestamp(p["timestamp"]).timestamp(),
                                                        pd.Timestamp(wm) if wm else None))
                durations.setdefault(int(p["batchId"]), (p.get("numInputRows"), p.get("durationMs") or {}))
            now = time.time()
            for e in engine.deploy.events.list("lat", limit=500):
                seen.setdefault(e.eid, now)
            time.sleep(0.05)
        events = engine.archiver.read("ev_lat", pd.Timestamp("2000-01-01", tz="UTC"), pd.Timestamp.now(tz="UTC"))
        phases = engine.deploy.flows["lat"].timings()  # driver seconds per phase of the event path
    finally:
        stop.set()
        engine.close()
        b.drop_schemas()
    batches = sorted(progress.values())
    lat = []
    for eid, last in zip(events["eid"], pd.to_datetime(events["ts"], utc=True), strict=True):
        start = next((t for t, wm in batches if wm is not None and wm >= last), None)
        if start is not None and eid in seen:
            lat.append((seen[eid] - start) / TRIGGER_S)
    med, p99 = percentile(lat, 50), percentile(lat, 99)
    busy = [d for _r, d in durations.values() if d.get("triggerExecution")]
    batch_s = {k: percentile([d.get(k, 0) / 1000 for d in busy], 50) for k in
               ("triggerExecution", "addBatch", "queryPlanning", "walCommit", "commitOffsets")} if busy else {}
    data = {"quick": args.quick, "seconds": seconds, "keys": args.keys, "trigger_s": TRIGGER_S,
            "matches": len(events), "measured": len(lat), "median_triggers": med, "p99_triggers": p99,
            "latencies_triggers": [round(x, 3) for x in lat], "load_avg_1m": round(os.getloadavg()[0], 2),
            "batch_median_s": batch_s, "event_path_seconds": phases,
            "batches": {str(b): {"rows": r, "ms": d} for b, (r, d) in sorted(durations.items())}}
    ok = bool(lat) and med is not None and p99 is not None
    ts = [target("pattern match in the API after the watermark passes its last row (median)",
                 f"<= {GOAL_TRIGGERS:g} triggers", f"{med} triggers" if med is not None else "no match",
                 ok and med <= GOAL_TRIGGERS),
          target("pattern match in the API after the watermark passes its last row (p99)",
                 f"<= {GOAL_TRIGGERS:g} triggers", f"{p99} triggers" if p99 is not None else "no match",
                 ok and p99 <= GOAL_TRIGGERS)]
    md = (f"## Pattern latency{' (quick)' if args.quick else ''}\n\n"
          f"`python -m bench latency{' --quick' if args.quick else ''}`: {args.keys} keys, one row per key per "
          f"{TRIGGER_S:g} s trigger for {seconds:g} s, `PATTERN (A B)`; {len(events)} matches, {len(lat)} timed. "
          f"Latency from the start of the first micro-batch whose watermark passed a match's last row to its "
          f"event in the engine's event log: median {med} triggers, p99 {p99} (goal <= {GOAL_TRIGGERS:g}). "
          f"Median micro-batch of the pattern query: {_secs(batch_s.get('triggerExecution'))} s in all, "
          f"{_secs(batch_s.get('addBatch'))} s running its plan and sink (events archived, handed to the event "
          f"worker), {_secs(batch_s.get('queryPlanning'))} s planning. "
          f"Load average during the run: {data['load_avg_1m']} on {os.cpu_count()} CPUs.\n")
    fig = None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(lat, bins=30)
        ax.axvline(GOAL_TRIGGERS, color="red", linestyle="--", label="goal")
        ax.set_xlabel("triggers after the watermark passed the last row")
        ax.set_ylabel("matches")
        ax.legend()
    except ImportError:
        pass
    publish(name, data, md, fig, targets=ts)
    print(md)
    return exit_code(ts)


def _secs(x) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
