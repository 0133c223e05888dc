"""``moirae replay FILE``: reproducible out-of-order replay of a CSV or Parquet file into
the archive (DEBS'19), or ``--analyze`` to measure a file's disorder.

The whole file is read and validated before anything is written, so a bad argument or
an unreadable file leaves nothing half-written. Rows are appended in delivery
(ingestion-time) order, one batch per second of ingestion time, paced by ``--speedup``
(``max``: as fast as possible); batch ids are the batch's position, so re-running the
same replay is a no-op. Rows with an unparseable event time go to the dead-letter table.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from moirae.commands.registry import command, print_json


def replay_into(archiver, stream: str, replay, speedup, sleep=time.sleep) -> dict:
    from archive import StreamSpec
    from archive.types import from_arrow

    rows = replay.rows
    cfg = replay.config
    payload = rows.drop(columns=[c for c in ("ingest_ts", "delay_ms") if c in rows.columns])
    schema = pa.Schema.from_pandas(payload, preserve_index=False)
    cols = {f.name: from_arrow(f.type, f"column {f.name!r} of {replay.source}") for f in schema}
    archiver.register_stream(StreamSpec.build(stream, cfg.ts_col, cols, kind="raw"))
    ingest = rows["ingest_ts"].to_numpy(dtype="datetime64[ns]").view("int64") if len(rows) else np.empty(0, "int64")
    second = (ingest - ingest[0]) // 1_000_000_000 if len(ingest) else ingest
    written = duplicates = 0
    fresh = not len(second)  # dead letters go in with the replay's first batch, once
    t0 = time.monotonic()
    for batch_id, sec in enumerate(np.unique(second)):
        if speedup != "max":
            wait = t0 + float(sec) / float(speedup) - time.monotonic()
            if wait > 0:
                sleep(wait)
        res = archiver.append(stream, batch_id, payload[second == sec])
        written += res.rows
        duplicates += res.duplicate
        fresh = fresh or (batch_id == 0 and not res.duplicate)
    for rec in replay.rejected.to_dict("records") if fresh else []:
        reason = rec.pop("reason", "unparseable row")
        archiver.dead_letter(stream, {k: (None if v != v else v) for k, v in rec.items()}, reason)
    return {"stream": stream, "rows": written, "batches_already_archived": int(duplicates),
            "dead_letters": len(replay.rejected) if fresh else 0}


@command("replay")
def replay_cmd(args) -> int:
    from moirae.sources import ReplayConfig, analyze_file, replay_file

    if args.analyze:
        stats = analyze_file(args.file, args.ts_col, args.ts_unit)
        print(stats.to_json() if args.json else stats.to_text())
        return 0
    config = ReplayConfig(ts_col=args.ts_col, unit=args.ts_unit, out_of_order=args.out_of_order,
                          min_delay_ms=args.min_delay, max_delay_ms=args.max_delay, distribution=args.distribution,
                          seed=args.seed, speedup=args.speedup)
    replay = replay_file(args.file, config)  # validates everything before the archive is touched
    from moirae import config as config_mod
    from moirae.store import open_archiver

    archiver = open_archiver(config_mod.load(args.config))
    try:
        result = replay_into(archiver, args.stream, replay, config.speedup)
    finally:
        archiver.close()
    result["out_of_order_measured_pct"] = round(replay.stats().out_of_order_pct, 2)
    if args.json:
        print_json(result)
    else:
        print(f"replayed {result['rows']:,} rows of {args.file} into stream {args.stream!r}: "
              f"{result['out_of_order_measured_pct']}% out of order, {result['dead_letters']} dead letters, "
              f"{result['batches_already_archived']} batches already archived")
    return 0
