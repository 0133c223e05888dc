"""Live-path overhead of how-provenance polynomials (H 4; ``ananke.polynomials``).

The overload event-query (a 5-minute average bandwidth per host above a threshold, M
fig. 1) runs over the same generated readings, as JSON files read as a stream
(``availableNow``, a few thousand rows per micro-batch), on the event-query's live
provenance path: the instrumented plan, one collect per batch, ANK-1 writing the graph to
PostgreSQL (:class:`ananke.store.GraphStore`) and, with polynomials on, each alert's
polynomial to ``ank_poly`` (:class:`ananke.poly_store.PolyStore`). Both ways a window
keeps its provenance (``ananke.window_provenance``) are measured:

- ``list`` (``state``): the windows keep their tuples' ids as lists in Spark's state; with
  polynomials, one more list per aggregated column holds the tuples' values;
- ``digest`` (``archive``, the engine's default): the windows keep a digest, resolved at
  the sink against the archive (:class:`moirae.ingest.window_provenance.ArchiveResolver`;
  the readings are archived before the run, as the engine's archive query would have);
  with polynomials the values are read with the resolved ids, one read per batch.

Throughput = input rows / wall time until the query has drained the input. The four
configurations (mode x polynomials off / on) run in one process and one Spark session,
each mode's off / on pair back to back in every round, which of the two goes first
alternating (:func:`bench.provenance._rounds.paired`), after one discarded warm-up run of
each on the whole input (the JVM still compiles through a shorter one). Goal: on / off
>= 0.9x in each mode, every round.

Run: ``python -m bench.provenance.poly_overhead [--quick] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from bench.harness import ROOT, exit_code, publish, target, verdict
from bench.provenance._rounds import paired

MEASURES = ("bench/provenance/poly_overhead.py", "bench/provenance/_rounds.py", "ananke/query.py",
            "ananke/poly_spark.py", "ananke/poly_store.py", "ananke/poly_writer.py", "ananke/spark_adapter.py", "ananke/polynomial.py",
            "moirae/ingest/window_provenance.py")
MODES = ("list", "digest")
CONFIGS = tuple(f"{m}_{p}" for m in MODES for p in ("off", "on"))
T0 = datetime(2024, 3, 1, tzinfo=UTC)
THRESHOLD = 62.0
STREAM = "metrics"


def readings(rows: int, hosts: int) -> pd.DataFrame:
    """``rows`` readings of ``hosts`` hosts every 10 s; a host's bandwidth drifts so that
    some windows cross the threshold."""
    rng = np.random.default_rng(7)
    i = np.arange(rows)
    h = i % hosts
    bw = np.round(50 + 15 * np.sin(i / (hosts * 40) + h) + rng.normal(0, 5, rows), 3)
    ts = pd.Timestamp(T0) + pd.to_timedelta(10 * (i // hosts), unit="s")
    return pd.DataFrame({"ts": ts, "host": [f"h{x}" for x in h], "bw": bw})


def write_input(folder: Path, frame: pd.DataFrame, files: int) -> None:
    """The readings as ``files`` JSON-lines files (one micro-batch each)."""
    per = len(frame) // files
    for f in range(files):
        part = frame.iloc[f * per:(f + 1) * per]
        lines = [json.dumps({"ts": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "host": h, "bw": float(b)})
                 for t, h, b in zip(part["ts"], part["host"], part["bw"], strict=True)]
        (folder / f"p{f:04d}.json").write_text("\n".join(lines) + "\n")


class _Archived:
    """The sources as :class:`~moirae.ingest.archive_waits.ArchiveWaits` sees them: the
    readings were archived before the run, so no archive query is writing any stream."""

    def live(self, streams):
        return []

    def is_sparse(self, name: str) -> bool:
        return False

    def archive_query(self, name: str):
        raise KeyError(name)


def run_once(spark, db, archiver, folder: Path, config: str, work: Path) -> dict:
    from pyspark.sql import functions as F

    from ananke.ank1 import Ank1
    from ananke.poly_store import PolyStore
    from ananke.query import ProvQuery
    from ananke.spark_adapter import Ank1SparkSink
    from ananke.store import GraphStore
    from moirae.ingest.archive_waits import ArchiveWaits
    from moirae.ingest.window_provenance import ArchiveResolver

    mode, polynomials = config.split("_")[0], config.endswith("_on")
    tag = uuid.uuid4().hex[:6]
    q = ProvQuery(polynomials=polynomials, digest=mode == "digest")
    df = spark.readStream.schema("ts timestamp, host string, bw double").option("maxFilesPerTrigger", 1).json(str(folder))
    m = q.source(df, STREAM, "ts", lateness="30 seconds")
    w = m.window("5 minutes", keys=["host"], aggs=[F.avg("bw").alias("avg_bw"), F.max("bw").alias("max_bw")],
                 ts_out="ts")
    sink = (w.filter(F.col("avg_bw") > THRESHOLD)
            .with_column("eid", F.concat_ws(":", F.lit("ov"), F.col("host"), F.date_format("ts", "yyyyMMddHHmm")))
            .sink("overload"))
    graph = GraphStore(db.connect, prefix=f"ank_b{tag}", borrow=db.connection).create()
    store = None
    if polynomials:
        store = PolyStore(db.connect, prefix=f"ank_poly_{tag}", borrow=db.connection).create()
        store.put_plan(sink.poly)
    resolver = None
    if sink.digest is not None:
        resolver = ArchiveResolver(archiver, sink.digest, ArchiveWaits(_Archived(), lambda: 1.0), 1.0)
    logic = Ank1.from_query(q).build(emit=graph)
    adapter = Ank1SparkSink(sink, logic, deliver_frame=lambda f, b: None, resolve=resolver,
                            polys=(lambda rows: store.put("overload", rows)) if store else None,
                            values=resolver.values if resolver is not None else None)
    t0 = time.perf_counter()
    query = adapter.start(str(work / f"ck_{tag}"), {"availableNow": True})
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "alerts": adapter.rows, "phases": dict(adapter.seconds),
           "poly_bytes": store.nbytes() if store else 0,
           "unmatched": resolver.status()["unmatched"] if resolver is not None else 0}
    if resolver is not None:
        resolver.stop()
    graph.close()
    if store is not None:
        store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40,000 rows, 2 rounds (else 400,000 rows, 6 rounds)")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    rows, files = (40_000, 8) if args.quick else (400_000, 40)
    rounds = args.rounds or (2 if args.quick else 6)
    name = "poly_overhead_quick" if args.quick else "poly_overhead"

    from archive import Archiver, ArchiveSettings, Database, StreamSpec
    from moirae.runtime.spark import spark_session

    db = Database.from_env(ROOT / ".moirae-bench", schema=f"bench_polyov_{uuid.uuid4().hex[:8]}")
    archiver = Archiver(db, ArchiveSettings(chunk_span=timedelta(hours=1)))
    spark = spark_session(master="local[2]", app_name="bench-poly-overhead")
    work = Path(tempfile.mkdtemp(prefix="polyov_"))
    try:
        frame = readings(rows, 20)
        folder = work / "in"
        folder.mkdir()
        write_input(folder, frame, files)
        archiver.register_stream(StreamSpec.build(STREAM, "ts", {"host": "text", "bw": "double"}))
        per = len(frame) // files
        for b in range(files):  # as the engine's archive query would have, batch by batch
            archiver.append(STREAM, b, frame.iloc[b * per:(b + 1) * per].reset_index(drop=True))

        def log(c: str, r: int, secs: float, out: dict) -> None:
            print(f"round {r + 1} {c}: {rows / secs:,.0f} rows/s, {out['alerts']} alerts, phases "
                  f"{ {k: round(v, 1) for k, v in out['phases'].items()} }", flush=True)

        got = paired([(f"{m}_off", f"{m}_on") for m in MODES], rounds,
                     lambda c, _: run_once(spark, db, archiver, folder, c, work),
                     warm=lambda c: run_once(spark, db, archiver, folder, c, work),
                     seconds_of=lambda out: out["seconds"], log=log)
        thr = {c: [rows / x for x in got.seconds[c]] for c in CONFIGS}
        last = {c: got.results[c][-1] for c in CONFIGS}
        data = {"quick": args.quick, "rows": rows, "files": files, "rounds": rounds, "orders": got.orders,
                "throughput": thr,
                "ratio": {m: [a / b for a, b in zip(thr[f"{m}_on"], thr[f"{m}_off"], strict=True)] for m in MODES},
                "alerts": {c: last[c]["alerts"] for c in CONFIGS},
                "poly_bytes": {m: last[f"{m}_on"]["poly_bytes"] for m in MODES},
                "unmatched": {m: last[f"{m}_off"]["unmatched"] + last[f"{m}_on"]["unmatched"] for m in MODES},
                "phases": {c: last[c]["phases"] for c in CONFIGS}}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        archiver.close()
        db.drop_schema()
        db.close()
    ts = targets(data)
    publish(name, data, render(data), figure(data), targets=ts)
    print(render(data))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    out = []
    for m in MODES:
        r = data["ratio"][m]
        out.append(target(f"polynomials: event-query live-path throughput, polynomials on / off ({m} provenance)",
                          ">= 0.9x", f"{statistics.median(r):.2f}x (rounds {min(r):.2f}-{max(r):.2f}x)",
                          verdict(r, 0.9)))
    return out


def render(data: dict) -> str:
    thr = data["throughput"]
    rows = "\n".join(
        f"| {c.split('_')[0]} | {c.split('_')[1]} | {statistics.median(thr[c]):,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in thr[c])} | {data['alerts'][c]} |" for c in CONFIGS)
    ratios = "; ".join(f"{m} {statistics.median(data['ratio'][m]):.2f}x "
                       f"(rounds {', '.join(f'{x:.2f}' for x in data['ratio'][m])})" for m in MODES)
    return ("## Polynomials: live-path overhead\n\n"
            f"The overload event-query over {data['rows']:,} readings in {data['files']} micro-batches, ANK-1 "
            "writing the graph to PostgreSQL, with polynomials off and on (each alert's polynomial to `ank_poly`), "
            "the windows' provenance kept as lists in Spark's state (`list`) or as a digest resolved against the "
            f"archive (`digest`, the engine's default); in each of {data['rounds']} rounds each mode's off / on "
            "pair runs back to back, which goes first alternating (`bench/provenance/poly_overhead.py`). "
            "Polynomials are built and stored on a thread of their own beside ANK-1 (`ananke/poly_writer.py`); "
            f"the batches waited for them {_waited(data)}.\n\n"
            "| provenance | polynomials | rows/s (median) | rounds | alerts |\n|---|---|---:|---|---:|\n"
            f"{rows}\n\nOn / off: {ratios}. Polynomials stored: "
            + ", ".join(f"{m} {data['poly_bytes'][m] / 1024:.0f} KiB" for m in MODES)
            + f"; windows the digest left unmatched: {data['unmatched']['digest']}."
            + (" Quick run." if data["quick"] else ""))


def _waited(data: dict) -> str:
    """How long the batches of each mode's last 'on' run waited for their polynomials."""
    ph = data["phases"]
    return ", ".join(f"{m} {ph[f'{m}_on'].get('poly_wait', 0.0):.2f} s (building and storing them took "
                     f"{ph[f'{m}_on'].get('poly', 0.0):.2f} s)" for m in MODES)


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    x = np.arange(len(MODES))
    for j, p in enumerate(("off", "on")):
        ax.bar(x + (j - 0.5) * 0.38, [statistics.median(data["throughput"][f"{m}_{p}"]) for m in MODES], 0.38,
               label=f"polynomials {p}")
        for k, m in enumerate(MODES):
            ax.scatter([k + (j - 0.5) * 0.38] * len(data["throughput"][f"{m}_{p}"]), data["throughput"][f"{m}_{p}"],
                       color="black", s=8, zorder=3)
    ax.set_xticks(x, [f"{m} provenance" for m in MODES])
    ax.set_ylabel("rows/s")
    ax.set_title("Live-path throughput, polynomials off vs on")
    ax.legend(fontsize=8)
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
