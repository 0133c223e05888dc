"""PostgreSQL unreachable while an executor writes its partition (the
executor-side COPY path, ``archive/exec_sink.py``). The executor retries with backoff
until the server is back and writes each row once; a retry after a commit that did
reach the server is a duplicate, not a second copy; past ``retry_seconds`` it fails
with an error that names the stream, the batch and the part."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from archive import Archiver, ArchiveSettings
from archive.exec_sink import PartitionJob, write_with_retry
from archive.ids import source_ids
from archive.pg import DatabaseUnavailable
from archive.streams import StreamSpec
from archive.types import ColumnType

pytestmark = [pytest.mark.faults, pytest.mark.postgres]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
SPEC = StreamSpec.build("metrics", "ts", {"sid": ColumnType.TEXT, "bw": ColumnType.DOUBLE})


def _partition(n: int) -> pa.Table:
    frame = pd.DataFrame({"ts": pd.date_range(T0, periods=n, freq="1s"), "sid": [f"s{i % 4}" for i in range(n)],
                          "bw": np.arange(n, dtype=float)})
    frame.insert(0, "_sid", source_ids("metrics", frame, SPEC.id_columns))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return table.set_column(1, "ts", table.column("ts").cast(pa.timestamp("us", "UTC")))  # as Spark hands it over


def _rows(db) -> int:
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT _sid) FROM metrics")
        n, distinct = cur.fetchone()
    assert n == distinct, "a row was written twice"
    return n


def test_an_executor_retries_through_a_restart_and_writes_each_row_once(private_pg, private_db):
    arch = Archiver(private_db, ArchiveSettings(chunk_span=timedelta(hours=1)))
    try:
        spec = arch.register_stream(SPEC)
        arch.ensure_span("metrics", T0, T0 + timedelta(minutes=10))
        job = PartitionJob(private_pg.dsn, private_db.schema, spec, batch_id=7,
                           span_us=arch.grid_of("metrics").span_us, retry_seconds=60)
        table = _partition(600)
        private_pg.stop()
        restarted = threading.Timer(1.5, private_pg.start)
        t0 = time.monotonic()
        restarted.start()
        rows, dead, dup, missing = write_with_retry(job, 0, table)
        waited = time.monotonic() - t0
        restarted.join()
        assert (rows, dead, dup, missing) == (600, 0, False, [])
        assert waited >= 1.0, "the write cannot have succeeded while the server was down"
        # the same partition again (Spark re-running the task): found, not written again
        assert write_with_retry(job, 0, table)[2] is True
        assert _rows(private_db) == 600
    finally:
        private_pg.ensure_running()
        arch.close()


def test_an_outage_longer_than_the_retry_budget_names_the_partition(private_pg, private_db):
    arch = Archiver(private_db, ArchiveSettings(chunk_span=timedelta(hours=1)))
    try:
        spec = arch.register_stream(SPEC)
        arch.ensure_span("metrics", T0, T0 + timedelta(minutes=10))
        job = PartitionJob(private_pg.dsn, private_db.schema, spec, batch_id=8,
                           span_us=arch.grid_of("metrics").span_us, retry_seconds=1.0)
        private_pg.stop()
        with pytest.raises(DatabaseUnavailable, match=r"batch 8 part 3 of stream 'metrics'.*unreachable for 1s"):
            write_with_retry(job, 3, _partition(10))
    finally:
        private_pg.ensure_running()
        arch.close()
    assert _rows(private_db) == 0
