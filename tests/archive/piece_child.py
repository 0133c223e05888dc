"""A batch write killed between two of its pieces, in a process of its own.

``python -m tests.archive.piece_child DSN SCHEMA PATH N MAX KILL_AFTER``: archives the
batch of ``N`` hourly rows of ``metrics`` (batch 7) with at most ``MAX`` chunks per
transaction, and SIGKILLs itself right after its piece ``KILL_AFTER`` committed. PATH is
``driver`` (:meth:`archive.Archiver.append`) or ``executor``
(:func:`archive.exec_sink.write_partition`, partition 0).
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta


def main(argv: list[str]) -> int:
    dsn, schema, path, n, most, kill_after = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    from archive import Database, chunks, exec_sink, writes
    from tests.archive.arch_helpers import make_archiver, metrics_spec, partition_table, rows

    chunks.MAX_CHUNKS_PER_BATCH = most
    arch = make_archiver(Database(dsn, schema))
    arch.register_stream(metrics_spec())
    frame = rows(n, step=timedelta(hours=1))
    done = [0]

    def after(result):
        done[0] += 1
        if done[0] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    if path == "driver":
        real = writes.Writes._write_piece
        writes.Writes._write_piece = lambda self, *a, **kw: after(real(self, *a, **kw))
        arch.append("metrics", 7, frame)
    else:
        real_exec = exec_sink._write_piece
        exec_sink._write_piece = lambda *a, **kw: after(real_exec(*a, **kw))
        job = exec_sink.PartitionJob(dsn, schema, arch.stream("metrics"), 7, arch.grid_of("metrics").span_us)
        exec_sink.write_partition(job, 0, partition_table(arch, frame))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
