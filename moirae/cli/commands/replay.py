"""``moirae replay FILE``: reproducible out-of-order replay of a CSV or Parquet file into
the archive (DEBS'19), or ``--analyze`` to measure disorder.

- **Analyze.** Without disorder flags, ``--analyze`` measures the file in its own order.
  With them (``--out-of-order`` and the delay flags), it is a dry run: it measures the
  delivery order that replay would produce, writes nothing, and says so.
- **No flag is silently ignored.** A delay flag without ``--out-of-order`` (no row would
  be delayed), or ``--speedup`` / ``--stream`` with ``--analyze`` (nothing is written),
  is an error naming the flag.
- **Validated first.** The whole file is read and validated before anything is written,
  so a bad argument or an unreadable file leaves nothing half-written.
- **Exactly once, resumable.** Rows are appended in delivery (ingestion-time) order, one
  batch per second of ingestion time, paced by ``--speedup`` (``max``: as fast as
  possible); batch ids are the batch's position. The replay is recorded per stream with
  a fingerprint of the file's bytes and of the options that decide the delivery order,
  in the same transaction as its dead letters (rows with an unparseable event time). An
  interrupted replay, run again, skips the batches already archived (without waiting for
  their pacing) and continues where it stopped: nothing twice, nothing lost. A different
  file or different options into the same stream are refused, since batch ids would then
  name other rows.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa

from moirae.cli.commands.registry import command, print_json
from moirae.cli.errors import ReplayFlagError, ReplayMismatch

#: Flags that shape the delivery order (their defaults when not given).
DISORDER_DEFAULTS = {"out_of_order": 0.0, "min_delay": 0.0, "max_delay": 2000.0, "distribution": "uniform",
                     "seed": 0}
#: Flags that only shape a replay into the archive.
WRITE_DEFAULTS = {"speedup": "max", "stream": "replay"}

REPLAYS_DDL = """CREATE TABLE IF NOT EXISTS moirae_replays (
    stream       text PRIMARY KEY,
    fingerprint  text NOT NULL,
    source       text NOT NULL,
    batches      bigint NOT NULL,
    rows         bigint NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now()
)"""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_flags(args) -> None:
    """Refuse flags that would be ignored (see the module docstring)."""
    ooo = args.out_of_order
    if not ooo:
        for name in ("min_delay", "max_delay", "distribution", "seed"):
            if getattr(args, name) is not None:
                raise ReplayFlagError(f"{_flag(name)} would be ignored: no row is delayed without "
                                      f"--out-of-order above 0{' (it is 0)' if ooo == 0 else ''}")
    if args.analyze:
        for name in WRITE_DEFAULTS:
            if getattr(args, name) is not None:
                raise ReplayFlagError(f"{_flag(name)} would be ignored: --analyze writes nothing to the archive")


def _value(args, name: str, defaults: dict):
    v = getattr(args, name)
    return defaults[name] if v is None else v


def replay_config(args):
    from moirae.sources import ReplayConfig

    d = {n: _value(args, n, DISORDER_DEFAULTS) for n in DISORDER_DEFAULTS}
    return ReplayConfig(ts_col=args.ts_col, unit=args.ts_unit, out_of_order=d["out_of_order"],
                        min_delay_ms=d["min_delay"], max_delay_ms=d["max_delay"], distribution=d["distribution"],
                        seed=d["seed"], speedup=_value(args, "speedup", WRITE_DEFAULTS))


def fingerprint(path: str, config) -> str:
    """What decides the batches: the file's bytes and the delivery-order options."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    opts = {"ts_col": config.ts_col, "unit": config.unit, "out_of_order": config.out_of_order,
            "min_delay_ms": config.min_delay_ms, "max_delay_ms": config.max_delay_ms,
            "distribution": config.distribution, "seed": config.seed}
    h.update(json.dumps(opts, sort_keys=True).encode())
    return h.hexdigest()


def begin(archiver, stream: str, print_: str, source: str, batches: int, rows: int, rejected) -> bool:
    """Record the replay of ``stream`` and its dead letters in one transaction; returns
    False when this very replay was begun before (a resume: its dead letters are in)."""
    from archive.validate import storable

    with archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute(REPLAYS_DDL)
        cur.execute("INSERT INTO moirae_replays (stream, fingerprint, source, batches, rows) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream) DO NOTHING RETURNING stream",
                    (stream, print_, source, batches, rows))
        if cur.fetchone() is None:
            cur.execute("SELECT fingerprint, source FROM moirae_replays WHERE stream = %s", (stream,))
            old, old_source = cur.fetchone()
            if old != print_:
                raise ReplayMismatch(f"stream {stream!r} holds a replay of {old_source} with other content or "
                                     "options; replay into another --stream (or the same file and options to "
                                     "resume)")
            return False
        for rec in rejected.to_dict("records"):
            reason = rec.pop("reason", "unparseable row")
            row = {storable(str(k)): (None if v != v else storable(v) if isinstance(v, str) else v)
                   for k, v in rec.items()}
            cur.execute("INSERT INTO moirae_dead_letters (stream, batch_id, row_data, reason) "
                        "VALUES (%s, NULL, %s, %s)", (stream, json.dumps(row, default=str), storable(reason)))
    return True


def replay_into(archiver, stream: str, replay, speedup, sleep=time.sleep, fingerprint_: str | None = None) -> dict:
    from archive import StreamSpec
    from archive.types import from_arrow

    rows = replay.rows
    cfg = replay.config
    payload = rows.drop(columns=[c for c in ("ingest_ts", "delay_ms") if c in rows.columns])
    schema = pa.Schema.from_pandas(payload, preserve_index=False)
    cols = {f.name: from_arrow(f.type, f"column {f.name!r} of {replay.source}") for f in schema}
    archiver.register_stream(StreamSpec.build(stream, cfg.ts_col, cols, kind="raw"))
    if len(payload):  # the whole file's rate picks the chunk interval (archive.chunk_target_rows), not one second's
        times = pd.to_datetime(payload[cfg.ts_col], utc=True)
        archiver.fix_interval(stream, len(payload), (times.max() - times.min()).to_pytimedelta())
    ingest = rows["ingest_ts"].to_numpy(dtype="datetime64[ns]").view("int64") if len(rows) else np.empty(0, "int64")
    second = (ingest - ingest[0]) // 1_000_000_000 if len(ingest) else ingest
    seconds = np.unique(second)
    fresh = begin(archiver, stream, fingerprint_ or "unfingerprinted", replay.source, len(seconds), len(rows),
                  replay.rejected)
    done = set(archiver.batch_ids(stream))
    todo = [b for b in range(len(seconds)) if b not in done]
    written = 0
    t0, first = time.monotonic(), (float(seconds[todo[0]]) if todo else 0.0)
    for batch_id in todo:
        sec = seconds[batch_id]
        if speedup != "max":
            wait = t0 + (float(sec) - first) / float(speedup) - time.monotonic()
            if wait > 0:
                sleep(wait)
        res = archiver.append(stream, batch_id, payload[second == sec])
        written += res.rows
    settle(archiver, stream, payload[cfg.ts_col], cfg.max_delay_ms)
    return {"stream": stream, "rows": written, "batches": len(seconds),
            "batches_already_archived": len(seconds) - len(todo), "resumed": not fresh and bool(done),
            "dead_letters": len(replay.rejected) if fresh else 0}


def settle(archiver, stream: str, event_times, max_delay_ms: float) -> None:
    """Tier the replayed stream by its own watermark (a stream that no
    instrumented query reads uses its own watermark, U = 0): the newest event time
    delivered less the replay's largest delay, before which every row has arrived.
    Chunks wholly before it leave the present tier, and all but the newest R recent
    chunks age to old, so a replayed year is not left "present"."""
    if len(event_times) == 0:
        return
    newest = pd.to_datetime(event_times, utc=True).max().to_pydatetime()
    archiver.demote(newest - timedelta(milliseconds=float(max_delay_ms or 0)), [stream])
    archiver.age()


def _analyze(args) -> int:
    from moirae.sources import analyze_file, replay_file

    if args.out_of_order:
        config = replay_config(args)
        stats = replay_file(args.file, config).stats()
        opts = {k: getattr(config, k) for k in ("out_of_order", "min_delay_ms", "max_delay_ms", "distribution",
                                               "seed")}
        what = ("dry run: the delivery order a replay with --out-of-order {out_of_order} --min-delay "
                "{min_delay_ms} --max-delay {max_delay_ms} --distribution {distribution} --seed {seed} would "
                "produce (nothing written)").format(**opts)
        mode = {"analyzed": "delivery order", "dry_run": True, "replay_options": opts}
    else:
        stats = analyze_file(args.file, args.ts_col, args.ts_unit)
        what = "the file in its own order (give --out-of-order to analyze a replay's delivery order)"
        mode = {"analyzed": "file", "dry_run": False}
    if args.json:
        print(json.dumps({**json.loads(stats.to_json()), **mode}, sort_keys=True))
    else:
        print(f"analyzed {what}:\n{stats.to_text()}")
    return 0


@command("replay")
def replay_cmd(args) -> int:
    from moirae.sources import replay_file

    replay_config(args)  # bad values are named first
    check_flags(args)
    if args.analyze:
        return _analyze(args)
    config = replay_config(args)
    stream = _value(args, "stream", WRITE_DEFAULTS)
    replay = replay_file(args.file, config)  # validates everything before the archive is touched
    from moirae import config as config_mod
    from moirae.runtime.store import open_archiver

    archiver = open_archiver(config_mod.load(args.config))
    try:
        result = replay_into(archiver, stream, replay, config.speedup, fingerprint_=fingerprint(args.file, config))
    finally:
        archiver.close()
    result["out_of_order_measured_pct"] = round(replay.stats().out_of_order_pct, 2)
    if args.json:
        print_json(result)
    else:
        resumed = (f"resumed after {result['batches_already_archived']} of {result['batches']} batches, "
                   if result["resumed"] else "")
        print(f"replayed {result['rows']:,} rows of {args.file} into stream {stream!r}: {resumed}"
              f"{result['out_of_order_measured_pct']}% out of order, {result['dead_letters']} dead letters, "
              f"{result['batches_already_archived']} batches already archived")
    return 0
