"""Recall time to first result with tens of thousands of chunks.

Two archives in the real Archiver (each its own schema on the same PostgreSQL), hourly
chunks, the same rows per chunk, loaded through ``Archiver.append`` in batches of at most
500 chunks (chunk creation in bounded transactions): the small archive is one stream of
200 chunks; the large one holds 20,000 chunks in total, as 10 streams of 2,000 (quick:
2 of 1,000), and the queried stream is one of them. (One stream of 20,000 partitions
was tried: PostgreSQL re-reads a partitioned table's whole partition list on each new
partition, so loading it took over 25 minutes on this loaded machine; see the report.) Events at the present
are recalled one at a time through the Recall Manager, interleaved between the two
archives, and *time to first result* is from just before ``submit`` to the first output
(the newest chunk's aggregate) reaching the sink; the rest of the task is cancelled.

What grows with the chunk count is the catalog (the task plan reads every chunk id of
the stream) and PostgreSQL's partition pruning; the newest chunk's own query is the same
size in both. The baseline is the small archive, measured in the same run.

Target: median TTFR of the large archive <= 1.3x the small archive's.

Run: ``python -m bench archive_chunks [--quick]`` (published as ``archive_chunks_quick``
when quick).

``--intervals`` measures instead what rate-based chunk intervals (``archive.chunk_target_rows``,
the engine's default, :mod:`archive.chunks`) change against the old default, one global
``chunk_span`` of 1 hour, in the same run: the same history (``--rate`` rows a second
from 12 hosts, by default the ``cluster`` scenario's metrics rate, 12 servers at one row
per 10 s; ``--days``, quick 7, else 28) is loaded into one archive per setting (the
global hour, and each ``--target-rows``, by default the engine's default), a day per
batch, and events at the present are recalled through the Recall Manager, the archives
in the balanced orders of :func:`bench.harness.run_orders`, each reading the whole
history. Reported: the interval chosen, chunks and rows per chunk, time to first result
(the newest chunk's aggregate) and time until the whole history was read (the boundary). No chunk is indexed (bulk loads land in the old tier):
the worst case for a chunk's scan. Published as
``archive_chunks_intervals[_RATErps][_quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta

from bench.harness import exit_code, publish, run_orders, target
from bench.recall._common import (
    NOW,
    SPAN,
    FirstChunkOperator,
    FirstOutputClock,
    archive,
    database,
    first_result,
    load_chunks,
)
from recall.manager import RecallManager

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/archive/archive_chunks.py", "bench/recall/_common.py", "archive", "recall", "scheduler")

FLAT_TARGET = 1.3
SMALL = 200
SERVERS, PERIOD_S = 12, 10  # the cluster scenario's metrics: one row per server per 10 s
ROWS_PER_CHUNK = 20
BATCH_CHUNKS = 500


def load(arch, chunks: int, stream: str) -> float:
    t = time.perf_counter()
    for back in range(0, chunks, BATCH_CHUNKS):
        load_chunks(arch, back, min(BATCH_CHUNKS, chunks - back), ROWS_PER_CHUNK, batch_id=back + 1, stream=stream)
    return time.perf_counter() - t


def _managers(archs: dict) -> tuple[FirstOutputClock, dict]:
    """One Recall Manager per archive (4 concurrent history-queries) with the first-chunk
    operator ``ttfr``, and the sink they share."""
    sink = FirstOutputClock()
    mgrs = {tag: RecallManager(a, max_concurrent=4, on_output=sink, timeout_ms=600_000) for tag, a in archs.items()}
    for tag, mgr in mgrs.items():
        mgr.register(FirstChunkOperator(archs[tag], name="ttfr"))
    return sink, mgrs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 x 1,000 chunks instead of 10 x 2,000")
    ap.add_argument("--events", type=int, default=30, help="events per archive")
    ap.add_argument("--intervals", action="store_true",
                    help="compare the default rate-based chunk interval with one global 1 h span instead")
    ap.add_argument("--rate", type=float, default=SERVERS / PERIOD_S,
                    help="--intervals: rows a second (default: the cluster scenario's metrics, 1.2)")
    ap.add_argument("--days", type=int, help="--intervals: days of history (default 7 quick, else 28)")
    ap.add_argument("--target-rows", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="--intervals: chunk_target_rows values to compare, comma-separated (default: the default)")
    args = ap.parse_args(argv)
    if args.intervals:
        return intervals(args.quick, args.events, args.rate, args.days, args.target_rows)
    n_streams, per_stream = (2, 1_000) if args.quick else (10, 2_000)
    large = n_streams * per_stream
    name = "archive_chunks_quick" if args.quick else "archive_chunks"
    sizes = {"small": SMALL, "large": per_stream}
    layout = {"small": ["metrics"], "large": ["metrics", *[f"metrics_{k}" for k in range(1, n_streams)]]}
    dbs = {tag: database(f"chunks_{tag}") for tag in sizes}
    archs = {tag: archive(db, streams=layout[tag]) for tag, db in dbs.items()}
    res = {tag: {"ttfr": [], "submit": []} for tag in sizes}
    load_s, catalog, queried = {}, {}, {}
    try:
        for tag, n in sizes.items():
            load_s[tag] = sum(load(archs[tag], n, s) for s in layout[tag])
            catalog[tag] = len(archs[tag].chunks())
            queried[tag] = len(archs[tag].chunks("metrics"))
            print(f"loaded {tag}: {catalog[tag]:,} chunks in {load_s[tag]:.1f} s", flush=True)
            with dbs[tag].connection() as conn, conn.cursor() as cur:
                # the queried stream only: a database-wide ANALYZE locks every partition of a
                # parent in one transaction (out of lock memory at 20,000)
                cur.execute('ANALYZE "metrics"')
        sink, mgrs = _managers(archs)
        try:
            for tag, mgr in mgrs.items():
                for w in range(3):  # warm-up, not counted
                    first_result(mgr, sink, f"{tag}-warm-{w}", "ttfr")
            for i in range(args.events):
                for tag in (("small", "large") if i % 2 == 0 else ("large", "small")):
                    ttfr, sub = first_result(mgrs[tag], sink, f"{tag}-{i}", "ttfr")
                    res[tag]["ttfr"].append(ttfr)
                    res[tag]["submit"].append(sub)
        finally:
            for mgr in mgrs.values():
                mgr.close()
    finally:
        for tag in sizes:
            archs[tag].close()
            with dbs[tag].connection() as conn, conn.cursor() as cur:
                for s in layout[tag]:  # one stream's partitions per transaction, then the schema
                    cur.execute(f'DROP TABLE IF EXISTS "{s}" CASCADE')
                    conn.commit()
            dbs[tag].drop_schema()

    med = {tag: statistics.median(r["ttfr"]) for tag, r in res.items()}
    sub = {tag: statistics.median(r["submit"]) for tag, r in res.items()}
    ratio = med["large"] / med["small"]
    load_avg = os.getloadavg()[0]
    for tag in sizes:
        print(f"{tag}: {catalog[tag]:,} chunks ({queried[tag]:,} in the queried stream), median TTFR {med[tag] * 1e3:.1f} ms (submit {sub[tag] * 1e3:.1f} ms)")
    print(f"ratio large/small {ratio:.2f} (target <= {FLAT_TARGET}); load average {load_avg:.1f}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.boxplot([[t * 1e3 for t in res[tag]["ttfr"]] for tag in sizes],
               tick_labels=[f"{catalog[tag]:,} chunks" for tag in sizes])
    ax.set_ylabel("time to first result (ms)")
    ax.grid(alpha=0.3)
    md = (
        f"### Recall time to first result with {large:,} chunks{' (quick)' if args.quick else ''}\n\n"
        f"Hourly chunks, {ROWS_PER_CHUNK} rows a chunk; the large archive is {n_streams} streams of "
        f"{per_stream:,} chunks, the small one stream of {SMALL}, loaded through `Archiver.append` "
        f"({BATCH_CHUNKS} chunks a batch, chunk creation in bounded transactions); {args.events} events "
        "per archive through the Recall Manager, interleaved. Baseline: the 200-chunk archive, same run. "
        f"Load average at the end: {load_avg:.1f}.\n\n"
        "| archive | chunks | in the queried stream | load (s) | median TTFR (ms) | median submit (ms) |\n"
        "|---|---|---|---|---|---|\n"
        + "".join(f"| {tag} | {catalog[tag]:,} | {queried[tag]:,} | {load_s[tag]:.0f} | {med[tag] * 1e3:.1f} | "
                  f"{sub[tag] * 1e3:.1f} |\n" for tag in sizes)
        + f"\nTTFR at {catalog['large']:,} chunks / at {catalog['small']:,} = **{ratio:.2f}** "
        f"(target <= {FLAT_TARGET}).\n")
    data = {"chunks": catalog, "queried_stream_chunks": queried, "rows_per_chunk": ROWS_PER_CHUNK, "events": args.events, "load_seconds": load_s,
            "ttfr_seconds": {t: r["ttfr"] for t, r in res.items()}, "ttfr_median": med, "submit_median": sub,
            "ratio": ratio, "flat_target": FLAT_TARGET, "load_average": load_avg}
    publish(name, data, md, fig, targets=targets(data))
    return exit_code(targets(data))


def _history(days: int, rate: float, rng) -> list:
    """``rate`` rows a second from SERVERS hosts (each one row per SERVERS / rate s), one
    frame per day ending at NOW (jittered times within each period; own source ids)."""
    import numpy as np
    import pandas as pd

    period = SERVERS / rate
    per_day = int(86_400 / period)
    frames = []
    for d in range(days, 0, -1):
        day0 = pd.Timestamp(NOW) - pd.Timedelta(days=d)
        slot = np.repeat(np.arange(per_day), SERVERS)
        offs = (slot + rng.uniform(0, 1, len(slot))) * period
        frame = pd.DataFrame({"ts": day0 + pd.to_timedelta(offs, unit="s"),
                              "host": np.char.add("h", np.tile(np.arange(SERVERS), per_day).astype(str)),
                              "v": rng.normal(50, 10, len(slot))})
        frame["_sid"] = np.arange(len(frame), dtype=np.int64) + d * 10**10
        frames.append(frame)
    return frames


def intervals(quick: bool, events: int, rate: float, days: int | None, targets_rows: list[int]) -> int:
    """Rate-based intervals (the default target, or ``targets_rows``) vs one global 1 h
    span: the same history, the same run."""
    import numpy as np

    from archive.archiver import Archiver
    from archive.settings import DEFAULT_CHUNK_TARGET_ROWS, ArchiveSettings
    from archive.streams import StreamSpec

    days = days or (7 if quick else 28)
    targets_rows = targets_rows or [DEFAULT_CHUNK_TARGET_ROWS]
    name = ("archive_chunks_intervals" + ("" if rate == SERVERS / PERIOD_S else f"_{rate:g}rps".replace(".", "_"))
            + ("_quick" if quick else ""))
    settings = {"global 1h": ArchiveSettings(chunk_span=SPAN, statement_timeout_ms=600_000)}
    for rows in targets_rows:
        tag = f"rate-based, {rows:,} rows" + (" (the default)" if rows == DEFAULT_CHUNK_TARGET_ROWS else "")
        settings[tag] = ArchiveSettings(chunk_span=SPAN, statement_timeout_ms=600_000, chunk_target_rows=rows)
    frames = _history(days, rate, np.random.default_rng(7))
    dbs = {tag: database(f"iv{i}") for i, tag in enumerate(settings)}
    archs = {tag: Archiver(dbs[tag], s) for tag, s in settings.items()}
    res = {tag: {"first": [], "whole": []} for tag in settings}
    info: dict[str, dict] = {}
    try:
        for tag, arch in archs.items():
            arch.register_stream(StreamSpec.build("metrics", "ts", {"host": "text", "v": "double"}))
            t = time.perf_counter()
            for b, frame in enumerate(frames):
                arch.append("metrics", b + 1, frame, bulk=True)
            cat = arch.chunks("metrics")
            info[tag] = {"interval_s": arch.grid_of("metrics").span.total_seconds(), "chunks": len(cat),
                         "rows": sum(c.rows for c in cat), "max_rows_per_chunk": max(c.rows for c in cat),
                         "load_s": time.perf_counter() - t}
            with dbs[tag].connection() as conn, conn.cursor() as cur:
                cur.execute('ANALYZE "metrics"')
            print(f"{tag}: {info[tag]}", flush=True)
        sink, mgrs = _managers(archs)
        try:
            tags = list(settings)
            for i, order in enumerate(run_orders(tags, events + 2), start=-2):  # two warm-up rounds, not counted
                for tag in order:
                    eid = f"{tag}-{i + 2}"
                    ev = {"eid": eid, "ts": NOW - timedelta(seconds=i + 3), "host": f"h{i % SERVERS}"}
                    t0 = time.perf_counter()
                    mgrs[tag].submit(ev, "ttfr")
                    with sink.cond:
                        if not sink.cond.wait_for(lambda e=eid: e in sink.ended, 600):
                            raise RuntimeError(f"event {eid} did not read its whole history in 600 s")
                    if i >= 0:
                        res[tag]["first"].append(sink.first[eid] - t0)
                        res[tag]["whole"].append(sink.ended[eid] - t0)
        finally:
            for mgr in mgrs.values():
                mgr.close()
    finally:
        for tag, arch in archs.items():
            arch.close()
            dbs[tag].drop_schema()

    load_avg = os.getloadavg()[0]
    med = {tag: {k: statistics.median(v) for k, v in r.items()} for tag, r in res.items()}
    base = "global 1h"
    for tag in settings:
        print(f"{tag}: {info[tag]['chunks']} chunks of {info[tag]['interval_s'] / 3600:g} h, median first result "
              f"{med[tag]['first'] * 1e3:.1f} ms, whole history {med[tag]['whole'] * 1e3:.1f} ms")
    print(f"load average {load_avg:.1f}")
    md = (
        f"### Rate-based chunk intervals vs one global span{' (quick)' if quick else ''}\n\n"
        f"The same {days} days at {rate:g} rows/s ({SERVERS} hosts; {info[base]['rows']:,} rows) loaded a day per "
        "batch into one archive per setting: the old default, one global 1 h `chunk_span`, and rate-based "
        "intervals (`chunk_target_rows`: the interval chosen from the first batch's rate, rounded down to the "
        "ladder). No chunk indexed (worst case). "
        f"{events} events per archive through the Recall Manager (4 concurrent history-queries), the archives in "
        f"balanced orders; each reads the whole history. Load average at the end: {load_avg:.1f}.\n\n"
        "| setting | interval | chunks | max rows a chunk | load (s) | median first result (ms) | "
        "median whole history (ms) |\n|---|---|---|---|---|---|---|\n"
        + "".join(f"| {tag} | {info[tag]['interval_s'] / 3600:g} h | {info[tag]['chunks']:,} | "
                  f"{info[tag]['max_rows_per_chunk']:,} | {info[tag]['load_s']:.1f} | {med[tag]['first'] * 1e3:.1f} | "
                  f"{med[tag]['whole'] * 1e3:.1f} |\n" for tag in settings)
        + "".join(f"\n{tag} / global 1h: chunks {info[tag]['chunks'] / info[base]['chunks']:.3f}x, first result "
                  f"{med[tag]['first'] / med[base]['first']:.2f}x, whole history "
                  f"{med[tag]['whole'] / med[base]['whole']:.2f}x.\n" for tag in settings if tag != base))
    data = {"days": days, "rate_rows_per_s": rate, "default_target_rows": DEFAULT_CHUNK_TARGET_ROWS,
            "settings": info, "events": events, "seconds": res, "median": med, "load_average": load_avg}
    publish(name, data, md, targets=[])  # a measurement of the change; no stated target
    return 0


def targets(data: dict) -> list[dict]:
    """>= 20,000 chunks with Recall TTFR <= 1.3x a 200-chunk archive's."""
    big = data["chunks"]["large"]
    q = data["queried_stream_chunks"]["large"]
    return [target(f"recall time to first result, archive of {big:,} chunks ({q:,} in the queried stream) "
                   f"vs {data['chunks']['small']:,}",
                   f"<= {data['flat_target']}x", f"{data['ratio']:.2f}x",
                   data["ratio"] <= data["flat_target"] if big >= 20_000 else None,
                   "" if big >= 20_000 else "quick size: below the 20,000 chunks the target is stated for")]


if __name__ == "__main__":
    raise SystemExit(main())
