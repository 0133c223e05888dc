"""Archive ingest: rows/s archived from a Spark streaming DataFrame through
the Archiver, against a raw ``COPY`` of the same CSV bytes into an unpartitioned table.

Measured in one run, on the same PostgreSQL:

- ``raw_copy`` (baseline): the CSV files, byte for byte, ``COPY ... FROM STDIN (FORMAT
  csv)`` into a plain table with the same columns. Measured before and after the others;
  the mean is the baseline.
- ``spark_stream``: a Spark file source over those CSV files (one file per trigger)
  archived as the engine archives a source (:meth:`moirae.engine.engine.Engine.source`): given
  the archive's layout once (:func:`archive.spark_sink.archive_layout`: typed cast,
  ``xxhash64`` source ids) and a watermark, then the Archive sink
  (``archive_batches``): each partition COPYs its rows (binary) from its executor,
  exactly-once per (stream, batch, partition). Wall time from the query start to
  ``processAllAvailable()``, in three rounds between raw COPYs; the mean is the figure.
  Spark is warmed first by three whole passes over the same files into other streams
  (the first is reported as the cold run: the JVM compiles the CSV, hashing and Arrow
  paths, and the Python workers import the archive, during its first seconds); a source
  archived for a year runs warm. One pass was not enough: the JIT compilers still took
  1-3 core-seconds in each of the next passes, falling pass by pass, on a 2-core machine
  where every core-second is taken from the tasks. Each measured run reports the JVM's
  CPU by thread class (:func:`bench.cpu_share.jvm_threads`) and by process
  (:class:`bench.cpu_share.CpuShare`), so a reader sees whether it ran warm and where its
  time went.
- ``spark_driver``: the previous sink, for comparison: the driver collects each batch
  (``toArrow``) and ``Archiver.append`` COPYs it (binary).
- ``archiver_arrow``: ``Archiver.append`` of the Arrow tables the sink would hand over
  (ids already there): the archive's own cost, without Spark.
- ``archiver_pandas``: ``Archiver.append`` of pandas frames parsed from the CSV (ids
  computed in Python by :func:`archive.ids.source_ids`).

Target: spark_stream >= 0.5 x raw_copy in every measured run, each run against the mean
of the raw COPYs just before and after it (:func:`round_ratios`). Run: ``python -m bench archive_ingest [--quick]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from archive import Archiver, ArchiveSettings, Database, StreamSpec
from archive.spark_sink import archive_batches, archive_layout, prepare_batch
from bench.cpu_share import CpuShare, jvm_threads
from bench.harness import exit_code, publish, spread_note, target, verdict

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/archive/archive_ingest.py", "bench/cpu_share.py", "archive", "moirae")

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 3, 1, tzinfo=UTC)
ROUNDS = 3  # measured runs of the engine's sink, each followed by a raw COPY
WARM = 3  # whole passes before them (the JIT's warm-up)
CSV_SCHEMA = "ts timestamp, host string, cpu double, mem double, n bigint"
COLUMNS = {"host": "text", "cpu": "double", "mem": "double", "n": "bigint"}


def write_files(d: Path, files: int, per_file: int, seed: int = 3) -> int:
    """CSV files of monitoring rows, ~1 s apart per host, over a few hours (several chunks)."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    total = 0
    for f in range(files):
        n = np.arange(total, total + per_file)
        ts = pd.Timestamp(T0) + pd.to_timedelta(n * 0.05, unit="s")
        frame = pd.DataFrame({
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "host": np.char.add("node-", rng.integers(0, 200, per_file).astype(str)),
            "cpu": np.round(rng.uniform(0, 100, per_file), 3),
            "mem": np.round(rng.normal(4e9, 1e8, per_file), 1),
            "n": n,
        })
        tmp = d / f".f{f:03d}.tmp"
        frame.to_csv(tmp, header=False, index=False)
        tmp.rename(d / f"f{f:03d}.csv")
        total += per_file
    return total


def raw_copy(db: Database, src: Path, rows: int) -> float:
    """Seconds to COPY the CSV bytes into a fresh unpartitioned table."""
    payloads = [p.read_bytes() for p in sorted(src.glob("f*.csv"))]
    table = f"raw_{uuid.uuid4().hex[:8]}"
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (ts timestamptz, host text, cpu double precision, "
                    "mem double precision, n bigint)")
        t = time.perf_counter()
        for payload in payloads:
            cur.copy_expert(f"COPY {table} FROM STDIN WITH (FORMAT csv)", io.BytesIO(payload))
        elapsed = time.perf_counter() - t
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchone()[0] == rows
        cur.execute(f"DROP TABLE {table}")
    return elapsed


def fresh_archiver(db: Database, stream: str) -> Archiver:
    arch = Archiver(db, ArchiveSettings(chunk_span=timedelta(hours=1)))
    arch.register_stream(StreamSpec.build(stream, "ts", COLUMNS))
    return arch


def count(arch: Archiver, stream: str) -> int:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT count(*) FROM "{stream}"')
        return cur.fetchone()[0]


def spark_stream(spark, db: Database, src: Path, ckpt: Path, stream: str, rows: int | None,
                 driver: bool = False) -> tuple[float, dict]:
    arch = fresh_archiver(db, stream)
    phases = {"to_arrow_s": 0.0, "append_s": 0.0, "batches": 0}
    spec = arch.stream(stream)
    sink = archive_batches(arch, stream)

    def write(batch_df, batch_id):
        t = time.perf_counter()
        if not driver:
            sink(batch_df, batch_id)  # what the engine runs
        else:  # the previous, driver-side sink, with its two phases timed
            table = prepare_batch(batch_df, spec).toArrow()
            t1 = time.perf_counter()
            arch.append(stream, int(batch_id), table)
            phases["to_arrow_s"] += t1 - t
            t = t1
        phases["append_s"] += time.perf_counter() - t
        phases["batches"] += 1

    reader = spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", 1).csv(str(src))
    if not driver:  # as Engine.source: the layout once, so no batch is projected (and analysed) again
        reader = archive_layout(reader, spec).withWatermark(spec.ts_col, "10 seconds")
    t = time.perf_counter()
    query = reader.writeStream.foreachBatch(write).option("checkpointLocation", str(ckpt)).start()
    query.processAllAvailable()
    elapsed = time.perf_counter() - t
    query.stop()
    if rows is not None:
        assert count(arch, stream) == rows
    arch.close()
    return elapsed, phases


def arrow_tables(spark, src: Path, spec: StreamSpec):
    out = []
    for p in sorted(src.glob("f*.csv")):
        out.append(prepare_batch(spark.read.schema(CSV_SCHEMA).csv(str(p)), spec).toArrow())
    return out


def archiver_append(db: Database, stream: str, batches, rows: int, profile: bool = False):
    arch = fresh_archiver(db, stream)
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof:
        prof.enable()
    for i, b in enumerate(batches):
        arch.append(stream, i, b)
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t
    assert count(arch, stream) == rows
    arch.close()
    top = None
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(18)
        top = s.getvalue()
    return elapsed, top


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size")
    ap.add_argument("--files", type=int, help="CSV files = micro-batches (default 8, quick 4)")
    ap.add_argument("--rows-per-file", type=int, help="default 250000, quick 25000")
    args = ap.parse_args(argv)
    files = args.files or (4 if args.quick else 8)
    per_file = args.rows_per_file or (25_000 if args.quick else 250_000)
    name = "archive_ingest_quick" if args.quick else "archive_ingest"

    from moirae.runtime.spark import spark_session

    tmp = Path(tempfile.mkdtemp(prefix="moirae-ingest-"))
    db = Database.from_env(ROOT / ".moirae-bench", schema=f"bench_ingest_{uuid.uuid4().hex[:8]}")
    try:
        src = tmp / "src"
        rows = write_files(src, files, per_file)
        mb = sum(p.stat().st_size for p in src.glob("f*.csv")) / 2**20
        spark = spark_session(master="local[2]", app_name="bench-archive-ingest")
        print(f"{rows:,} rows in {files} CSV files ({mb:.0f} MB)", flush=True)
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        warm_runs = [spark_stream(spark, db, src, tmp / f"ckpt_warm{w}", f"warm{w}", rows)[0]
                     for w in range(WARM)]  # the JIT, the workers' imports
        cold_s = warm_runs[0]
        raw_runs, spark_runs, phase_runs, cpu_runs = [raw_copy(db, src, rows)], [], [], []
        for r in range(ROUNDS):
            own0 = own_cpu(jvm_pid)
            threads0, share = jvm_threads(jvm_pid), CpuShare(interval_s=0.5).start()
            s, ph = spark_stream(spark, db, src, tmp / f"ckpt{r}", f"stream_e2e{r}", rows)
            threads1 = jvm_threads(jvm_pid)
            cpu_runs.append({**share.stop(), "own_jvm": round(own_cpu(jvm_pid) - own0, 1),
                             "jvm_threads": {k: round(threads1[k] - threads0[k], 2) for k in threads0}})
            spark_runs.append(s)
            phase_runs.append(ph)
            print(f"run {r}: {s:.2f} s, CPU {cpu_runs[-1]}", flush=True)
            raw_runs.append(raw_copy(db, src, rows))
        spark_s = sum(spark_runs) / len(spark_runs)
        phases = {k: sum(p[k] for p in phase_runs) / len(phase_runs) for k in phase_runs[0]}
        driver_s, driver_phases = spark_stream(spark, db, src, tmp / "ckpt_driver", "stream_driver", rows,
                                               driver=True)
        tables = arrow_tables(spark, src, StreamSpec.build("arrow_path", "ts", COLUMNS))
        arrow_s, arrow_prof = archiver_append(db, "arrow_path", tables, rows, profile=True)
        frames = [pd.read_csv(p, header=None, names=["ts", *COLUMNS]) for p in sorted(src.glob("f*.csv"))]
        pandas_s, pandas_prof = archiver_append(db, "pandas_path", frames, rows, profile=True)
        raw_runs.append(raw_copy(db, src, rows))
        raw_s = sum(raw_runs) / len(raw_runs)

        rate = {k: rows / v for k, v in {"raw_copy": raw_s, "spark_stream": spark_s, "spark_driver": driver_s,
                                         "archiver_arrow": arrow_s, "archiver_pandas": pandas_s}.items()}
        ratio = {k: rate[k] / rate["raw_copy"] for k in rate}
        spark_only = spark_s - phases["append_s"]
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.2))
        labels = ["raw COPY", "Spark stream\n(executors COPY)", "Spark stream\n(driver collects)",
                  "Archiver\n(Arrow)", "Archiver\n(pandas)"]
        keys = ["raw_copy", "spark_stream", "spark_driver", "archiver_arrow", "archiver_pandas"]
        ax.barh(labels[::-1], [rate[k] / 1e3 for k in keys][::-1], color=["C0", "C1", "C4", "C2", "C3"][::-1])
        ax.set_xlabel("thousand rows / s")
        ax.set_title(f"Archive ingest, {rows:,} rows")
        data = {"rows": rows, "files": files, "csv_mb": mb, "seconds": {
            "raw_copy_runs": raw_runs, "raw_copy": raw_s, "spark_stream_runs": spark_runs, "spark_stream_cold": cold_s, "spark_stream_warm_runs": warm_runs,
            "spark_stream": spark_s,
            "spark_driver": driver_s, "archiver_arrow": arrow_s, "archiver_pandas": pandas_s}, "rows_per_s": rate, "ratio_to_raw_copy": ratio,
            "spark_phases": {**phases, "spark_side_s": spark_only}, "driver_phases": driver_phases,
            "cpu_runs": cpu_runs,
            "target": 0.5, "quick": args.quick,
            "profile_archiver_arrow": arrow_prof, "profile_archiver_pandas": pandas_prof}
        data["met"] = verdict(round_ratios(data), 0.5)
        md = render(data)
        publish(name, data, md, fig, targets=targets(data))
        print(md)
        print(arrow_prof)
        print(pandas_prof)
        return exit_code(targets(data))
    finally:
        db.drop_schema()
        shutil.rmtree(tmp, ignore_errors=True)


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a run, from its stored figures."""
    sec, rate, ratio = data["seconds"], data["rows_per_s"], data["ratio_to_raw_copy"]
    rows, files, phases, driver = data["rows"], data["files"], data["spark_phases"], data["driver_phases"]
    rounds = round_ratios(data)
    met = verdict(rounds, 0.5)
    cold = sec["spark_stream_cold"]
    return (
        f"### Archive ingest from a Spark stream{' (quick)' if data.get('quick') else ''}\n\n"
        f"{rows:,} rows (event time, host, two doubles, a bigint) in {files} CSV files of {rows // files:,} rows "
        f"({data['csv_mb']:.0f} MB), one file per micro-batch. Baseline: raw `COPY` of the same CSV bytes into an "
        f"unpartitioned table, run before, between and after the others (mean of "
        f"{', '.join(f'{x:.2f}' for x in sec['raw_copy_runs'])} s).\n\n"
        "| path | seconds | rows/s | vs raw COPY |\n|---|---|---|---|\n"
        f"| raw COPY (baseline) | {sec['raw_copy']:.2f} | {rate['raw_copy']:,.0f} | 1.00 |\n"
        f"| Spark stream -> each partition COPYs from its executor (end to end, the engine's sink; mean of "
        f"{', '.join(f'{x:.2f}' for x in sec['spark_stream_runs'])} s) | "
        f"{sec['spark_stream']:.2f} | {rate['spark_stream']:,.0f} | **{ratio['spark_stream']:.2f}** |\n"
        f"| the same, cold: its first pass in this Spark session (warm-up passes took "
        f"{', '.join(f'{x:.2f}' for x in sec['spark_stream_warm_runs'])} s) | {cold:.2f} | "
        f"{rows / cold:,.0f} | {rows / cold / rate['raw_copy']:.2f} |\n"
        f"| Spark stream -> driver collects (toArrow) -> Archiver.append (previous sink) | {sec['spark_driver']:.2f} | "
        f"{rate['spark_driver']:,.0f} | {ratio['spark_driver']:.2f} |\n"
        f"| Archiver.append of the sink's Arrow tables (no Spark) | {sec['archiver_arrow']:.2f} | "
        f"{rate['archiver_arrow']:,.0f} | {ratio['archiver_arrow']:.2f} |\n"
        f"| Archiver.append of pandas frames (ids hashed in Python) | {sec['archiver_pandas']:.2f} | "
        f"{rate['archiver_pandas']:,.0f} | {ratio['archiver_pandas']:.2f} |\n\n"
        f"Inside an executor-sink run (mean): {phases['batches']:.0f} batches, {phases['append_s']:.2f} s inside "
        f"foreachBatch, {phases['spark_side_s']:.2f} s outside it (file scan planning, triggers). Previous sink: "
        f"toArrow {driver['to_arrow_s']:.2f} s, Archiver.append {driver['append_s']:.2f} s.\n\n"
        f"{cpu_md(data['cpu_runs'])}\n\n"
        f"**Spark stream / raw COPY = {ratio['spark_stream']:.2f}** (target >= 0.50 in every run; by run, each against the raw COPYs just before and after it: "
        f"{', '.join(f'{x:.2f}' for x in rounds)}): **{ {True: 'met', False: 'missed', None: 'unresolved'}[met]}**."
    )


def cpu_md(runs: list[dict]) -> str:
    """Where the measured runs' CPU went (core-seconds, mean over the runs), as a sentence.

    >>> cpu_md([{"seconds": 4.0, "cores": 2, "busy": 7.0, "jvm": 5.0, "postgres": 1.0, "python_workers": 0.5,
    ...          "driver": 0.1, "other": 0.4, "jvm_threads": {"tasks": 4.0, "jit": 0.5, "gc": 0.2, "other": 0.3}}])
    'CPU of a measured run (mean core-seconds, 2 cores): 7.0 of 8.0 busy; the JVM 5.0 (its task threads 4.0, JIT compilers 0.5, GC 0.2), PostgreSQL 1.0, Python workers 0.5, this driver 0.1, other 0.4.'
    """
    def mean(get):
        return sum(get(r) for r in runs) / len(runs)

    threads = {k: mean(lambda r, k=k: r["jvm_threads"][k]) for k in ("tasks", "jit", "gc")}
    own = (f"; this run's own JVM {mean(lambda r: r['own_jvm']):.1f}, the other JVMs on the host "
           f"{mean(lambda r: max(0.0, r['jvm'] - r['own_jvm'])):.1f}" if all("own_jvm" in r for r in runs) else "")
    return (f"CPU of a measured run (mean core-seconds, {runs[0]['cores']} cores): "
            f"{mean(lambda r: r['busy']):.1f} of {mean(lambda r: r['seconds'] * r['cores']):.1f} busy; "
            f"the JVM {mean(lambda r: r['jvm']):.1f} (its task threads {threads['tasks']:.1f}, JIT compilers "
            f"{threads['jit']:.1f}, GC {threads['gc']:.1f}{own}), PostgreSQL {mean(lambda r: r['postgres']):.1f}, "
            f"Python workers {mean(lambda r: r['python_workers']):.1f}, this driver {mean(lambda r: r['driver']):.1f}, "
            f"other {mean(lambda r: r['other']):.1f}.")


def own_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, its ended threads included."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def round_ratios(data: dict) -> list[float]:
    """Each measured Spark stream run against the raw COPYs run just before and just
    after it (their mean), or against the mean of all raw runs for a result that did not
    record them: the spread the verdict reads. A pair of neighbours shares the host's
    state of the moment, which drifts over a run on a shared machine.

    >>> round_ratios({"seconds": {"raw_copy": 5.0, "raw_copy_runs": [4.0, 6.0, 4.0, 5.0, 6.0],
    ...                           "spark_stream_runs": [10.0, 8.0, 9.0]}})
    [0.5, 0.625, 0.5]
    """
    sec = data["seconds"]
    raw, runs = sec.get("raw_copy_runs"), sec["spark_stream_runs"]
    if raw is None or len(raw) < len(runs) + 1:
        return [sec["raw_copy"] / s for s in runs]
    return [(raw[i] + raw[i + 1]) / 2 / s for i, s in enumerate(runs)]


def targets(data: dict) -> list[dict]:
    """Archive ingest from a Spark stream >= 50 % of a raw COPY of the same rows, in every
    measured run."""
    r, rounds = data["ratio_to_raw_copy"]["spark_stream"], round_ratios(data)
    return [target(f"archive ingest from a Spark stream vs raw COPY ({data['rows']:,} rows)", ">= 0.5x",
                   f"{r:.2f}x (by run: {', '.join(f'{x:.2f}' for x in rounds)})", verdict(rounds, 0.5),
                   spread_note(rounds, 0.5))]

if __name__ == "__main__":
    raise SystemExit(main())
