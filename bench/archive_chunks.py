"""Recall time to first result with tens of thousands of chunks (issue 12 §1).

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

Run: ``python -m bench.archive_chunks [--quick]`` (published as ``archive_chunks_quick``
when quick).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench._recall_common import (
    FirstChunkOperator,
    FirstOutputClock,
    archive,
    database,
    first_result,
    load_chunks,
)
from bench.report import exit_code, publish, target
from recall.manager import RecallManager

FLAT_TARGET = 1.3
SMALL = 200
ROWS_PER_CHUNK = 20
BATCH_CHUNKS = 500


def load(arch, chunks: int, stream: str) -> float:
    t = time.perf_counter()
    for back in range(0, chunks, BATCH_CHUNKS):
        load_chunks(arch, back, min(BATCH_CHUNKS, chunks - back), ROWS_PER_CHUNK, batch_id=back + 1, stream=stream)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 x 1,000 chunks instead of 10 x 2,000")
    ap.add_argument("--events", type=int, default=30, help="events per archive")
    args = ap.parse_args(argv)
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
        sink = FirstOutputClock()
        mgrs = {tag: RecallManager(a, max_concurrent=4, on_output=sink, timeout_ms=600_000)
                for tag, a in archs.items()}
        try:
            for tag, mgr in mgrs.items():
                mgr.register(FirstChunkOperator(archs[tag], name="ttfr"))
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


def targets(data: dict) -> list[dict]:
    """Issue 12 §1: >= 20,000 chunks with Recall TTFR <= 1.3x a 200-chunk archive's."""
    big = data["chunks"]["large"]
    q = data["queried_stream_chunks"]["large"]
    return [target(f"recall time to first result, archive of {big:,} chunks ({q:,} in the queried stream) "
                   f"vs {data['chunks']['small']:,}",
                   f"<= {data['flat_target']}x", f"{data['ratio']:.2f}x",
                   data["ratio"] <= data["flat_target"] if big >= 20_000 else None,
                   "" if big >= 20_000 else "quick size: below the 20,000 chunks the target is stated for")]


if __name__ == "__main__":
    raise SystemExit(main())
