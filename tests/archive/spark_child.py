"""A streaming archive job run as its own process, so a test can SIGKILL it mid-stream.

``python -m tests.archive.spark_child DSN SCHEMA SRC CHECKPOINT LOG [--hang-on N]``: archives the CSV
files in SRC (one per trigger) into stream ``metrics``; after each append it writes the
AppendResult as a JSON line to LOG. With ``--hang-on N`` it blocks after archiving batch
N (after the database commit, before Spark commits the batch) until it is killed;
without it, it processes everything available and exits. ``--parts K`` hash-partitions
each batch into K partitions by ``host`` (each partition COPYs its rows from its
executor); with ``--hang-part P`` the hang is on the executor instead, right after
partition P of batch N committed (before the partitions after it are written), and the
executor appends ``{"batch": N, "part": P}`` to LOG first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

CSV_SCHEMA = "ts timestamp, host string, v double, n bigint"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    for a in ("dsn", "schema", "src", "checkpoint", "log"):
        ap.add_argument(a)
    ap.add_argument("--hang-on", type=int)
    ap.add_argument("--parts", type=int)
    ap.add_argument("--hang-part", type=int)
    args = ap.parse_args(argv)
    from archive import Database
    from archive.spark_sink import archive_batches
    from moirae.runtime.spark import spark_session
    from tests.archive.arch_helpers import make_archiver, metrics_spec

    arch = make_archiver(Database(args.dsn, args.schema))
    arch.register_stream(metrics_spec())
    spark = spark_session(master="local[1]", app_name="archive-kill-test")

    def on_batch(result, _df):
        with open(args.log, "a") as f:
            f.write(json.dumps({"batch": result.batch_id, "rows": result.rows,
                                "duplicate": result.duplicate}) + "\n")
        if args.hang_on is not None and args.hang_part is None and result.batch_id == args.hang_on:
            time.sleep(3600)

    log, hang_on, hang_part = args.log, args.hang_on, args.hang_part

    def after_part(batch_id, part):  # runs on the executor (pickled by value from __main__)
        if hang_part is not None and (batch_id, part) == (hang_on, hang_part):
            with open(log, "a") as f:
                f.write(json.dumps({"batch": batch_id, "part": part}) + "\n")
            time.sleep(3600)

    stream = spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", 1).csv(args.src)
    if args.parts:
        stream = stream.repartition(args.parts, "host")
    query = (stream.writeStream.foreachBatch(archive_batches(arch, "metrics", on_batch, after_part=after_part))
             .option("checkpointLocation", args.checkpoint).start())
    query.processAllAvailable()
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
