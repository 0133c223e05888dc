"""Helpers for the Archiver tests: the test stream, row frames, catalog and pg_indexes probes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa

from archive import Archiver, ArchiveSettings, Database, StreamSpec
from archive.ids import source_ids

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SPAN = timedelta(hours=1)
COLUMNS = {"host": "text", "v": "double", "n": "bigint"}


def metrics_spec(name: str = "metrics", **kw) -> StreamSpec:
    """The test stream: an event time, a host, a double and a bigint; ``host`` indexed."""
    kw.setdefault("indexes", [("host",), ("n", "ts")])
    return StreamSpec.build(name, "ts", COLUMNS, **kw)


def rows(n: int, start: datetime = T0, step: timedelta = timedelta(minutes=7), first: int = 0,
         hosts: int = 3) -> pd.DataFrame:
    """``n`` well-formed rows from ``start``, one every ``step``; ``n`` column is unique."""
    idx = range(first, first + n)
    return pd.DataFrame({
        "ts": [start + i * step for i in range(n)],
        "host": [f"h{i % hosts}" for i in idx],
        "v": [i / 4 for i in idx],
        "n": list(idx),
    })


def make_archiver(db: Database, recent: int = 2, span: timedelta = SPAN, **kw) -> Archiver:
    return Archiver(db, ArchiveSettings(chunk_span=span, recent_chunks=recent, **kw))


@contextmanager
def fresh_archiver(dsn: str, **kw) -> Iterator[Archiver]:
    """An Archiver in a brand-new schema (for hypothesis examples, which cannot use
    function-scoped fixtures); the schema is dropped afterwards."""
    db = Database(dsn, schema=f"h_{uuid.uuid4().hex[:12]}")
    arch = make_archiver(db, **kw)
    try:
        arch.register_stream(metrics_spec())
        yield arch
    finally:
        arch.close()
        db.drop_schema()


def table_rows(arch: Archiver, stream: str = "metrics") -> pd.DataFrame:
    """Every archived row of ``stream`` (all partitions), ordered by ``n``."""
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT _sid, _batch, ts, host, v, n FROM "{stream}" ORDER BY n')
        return pd.DataFrame(cur.fetchall(), columns=["_sid", "_batch", "ts", "host", "v", "n"])


def catalog_rows(arch: Archiver, stream: str = "metrics") -> dict[int, int]:
    return {c.chunk_id: c.rows for c in arch.chunks(stream)}


def partition_counts(arch: Archiver, stream: str = "metrics") -> dict[int, int]:
    """Actual row counts per chunk, from the partitions themselves."""
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT floor(extract(epoch FROM ts) / %s)::bigint, count(*) FROM "{stream}" GROUP BY 1',
                    (arch.grid.span.total_seconds(),))
        return dict(cur.fetchall())


def indexes_of(arch: Archiver, stream: str = "metrics") -> dict[str, set[str]]:
    """``pg_indexes``: partition table name -> index names, in this test's schema."""
    out: dict[str, set[str]] = {}
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT tablename, indexname FROM pg_indexes WHERE schemaname = %s AND tablename LIKE %s",
                    (arch.db.schema, f"{stream}__c%"))
        for table, index in cur.fetchall():
            out.setdefault(table, set()).add(index)
    return out


def partition_table(arch: Archiver, frame: pd.DataFrame, stream: str = "metrics") -> pa.Table:
    """``frame`` as Spark hands a partition to an executor's writer: ``_sid``, event time
    (us, UTC), payload."""
    spec = arch.stream(stream)
    frame = frame.copy()
    frame.insert(0, "_sid", source_ids(stream, frame, spec.id_columns))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return table.set_column(1, spec.ts_col, table.column(spec.ts_col).cast(pa.timestamp("us", "UTC")))


def blocked_on_lock(archiver, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock."""
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
        row = cur.fetchone()
        return row is not None and row[0] == "Lock"


def blocking_others(archiver, pid: int) -> bool:
    """Whether some backend waits for a lock that backend ``pid`` holds."""
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,))
        return cur.fetchone()[0] > 0


def wait_until(cond, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)
