"""An executor creates the chunks its partition reaches (archive/exec_sink.py with
archive.chunks.create_chunks), without Spark: the partition writer is called in this
process, as a Python worker would call it.

Creation runs in short transactions committed before the data transaction opens, at
most CHUNKS_PER_TRANSACTION chunks each; two creators of one chunk both succeed; a
creator does not wait for open writers of the stream's table's other chunks; the new
chunk's tier follows the driver's horizon snapshot and ``bulk``, and a chunk created
present from a stale snapshot is demoted by the next demotion pass; a chunk dropped
between its creation and the write is reported missing, for the driver to create."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg2
import pytest

from archive import chunks as chunks_mod
from archive import exec_sink
from archive.abc import Tier
from archive.exec_sink import PartitionJob, write_partition
from tests.archive.arch_helpers import (
    T0,
    blocked_on_lock,
    catalog_rows,
    partition_counts,
    partition_table,
    rows,
    table_rows,
    wait_until,
)

pytestmark = pytest.mark.postgres
HOUR_US = 3_600_000_000


@pytest.fixture
def job(archiver):
    """A PartitionJob for batch 1 of ``metrics`` (1-hour chunks, no horizon); the
    worker connection it opens in this process is closed afterwards."""
    archiver.fix_interval("metrics", 0, timedelta(0))
    yield PartitionJob(archiver.db.dsn, archiver.db.schema, archiver.stream("metrics"), 1, HOUR_US)
    exec_sink.drop_worker_connection(archiver.db.dsn, archiver.db.schema)


def _creating_transactions(archiver) -> list[int]:
    """How many of the stream's partitions each transaction created (pg_class xmin)."""
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'metrics'::regclass GROUP BY c.xmin::text::bigint")
        return sorted(n for (n,) in cur.fetchall())


def test_an_executor_creates_its_chunks_in_bounded_transactions_then_writes(archiver, job, monkeypatch):
    monkeypatch.setattr(chunks_mod, "CHUNKS_PER_TRANSACTION", 4)
    frame = rows(30, step=timedelta(minutes=20))  # 10 hourly chunks, none created yet
    assert write_partition(job, 0, partition_table(archiver, frame)) == (30, 0, False, [])
    assert _creating_transactions(archiver) == [2, 4, 4]
    assert sorted(catalog_rows(archiver)) == list(range(473_352, 473_362))  # T0 is hour 473,352
    archiver.commit_parts("metrics", 1)
    assert catalog_rows(archiver) == partition_counts(archiver) == {c: 3 for c in range(473_352, 473_362)}
    assert table_rows(archiver)["n"].tolist() == list(range(30))


def test_creation_runs_with_no_transaction_open_on_the_worker_connection(archiver, job, monkeypatch):
    """The executor never creates a chunk inside its data transaction (or any other):
    a writer waiting for the table's exclusive lock while holding its own write lock
    could deadlock with another partition doing the same."""
    real = chunks_mod.create_chunks
    states = []

    def watched(cur, *args):
        states.append(cur.connection.info.transaction_status)
        return real(cur, *args)

    monkeypatch.setattr(chunks_mod, "create_chunks", watched)
    write_partition(job, 0, partition_table(archiver, rows(5, step=timedelta(hours=1))))
    assert states and set(states) == {psycopg2.extensions.TRANSACTION_STATUS_IDLE}


def test_a_new_chunks_tier_follows_the_horizon_snapshot_and_bulk(archiver, job):
    horizon = T0 + timedelta(hours=2)
    at_horizon = PartitionJob(job.dsn, job.schema, job.spec, 1, HOUR_US, horizon=horizon)
    frame = rows(4, step=timedelta(hours=1))  # chunks ending at T0 + 1 h .. T0 + 4 h
    res = write_partition(at_horizon, 0, partition_table(archiver, frame))
    assert res == (4, 0, False, [])
    got = {c.start: c.tier for c in archiver.chunks("metrics")}
    assert got == {T0: Tier.OLD, T0 + timedelta(hours=1): Tier.OLD,  # ends at the horizon: old
                   T0 + timedelta(hours=2): Tier.PRESENT, T0 + timedelta(hours=3): Tier.PRESENT}
    assert archiver.commit_parts("metrics", 1).late_rows == 2  # rows into old chunks are late
    bulk = PartitionJob(job.dsn, job.schema, job.spec, 2, HOUR_US, horizon=horizon, bulk=True)
    write_partition(bulk, 0, partition_table(archiver, rows(1, start=T0 + timedelta(hours=9), first=10)))
    assert {c.start: c.tier for c in archiver.chunks("metrics")}[T0 + timedelta(hours=9)] is Tier.OLD


def test_a_chunk_created_present_from_a_stale_horizon_is_demoted_by_the_next_pass(archiver, job):
    """The driver's horizon moved after the job's snapshot (None here): the executor
    creates the chunk present although it is behind the horizon; the next demotion
    pass, even with no newer horizon, finds it."""
    archiver.demote(T0 + timedelta(hours=5))
    write_partition(job, 0, partition_table(archiver, rows(3, start=T0 + timedelta(hours=1))))
    archiver.commit_parts("metrics", 1)
    assert [c.tier for c in archiver.chunks("metrics")] == [Tier.PRESENT]
    moves = archiver.demote(T0 + timedelta(hours=5))
    assert [(m.chunk_id, m.from_tier, m.to_tier) for m in moves] == [(473_353, Tier.PRESENT, Tier.RECENT)]
    assert [c.tier for c in archiver.chunks("metrics")] == [Tier.RECENT]


def test_two_creators_of_the_same_chunks_both_succeed(archiver):
    """Two partitions of one batch found the same chunks missing: the second waits for
    the first (advisory lock), then finds them created; one partition and one catalog
    row per chunk, with the same tier for both."""
    spec = archiver.stream("metrics")
    version = _chunks_version(archiver)
    first, second = archiver.db.connect(), archiver.db.connect()
    out = {}
    try:
        with first.cursor() as cur:
            out["first"] = chunks_mod.create_chunks(cur, spec, HOUR_US, [10, 11], None, False)

        def create_second():
            with second.cursor() as cur:
                out["second"] = chunks_mod.create_chunks(cur, spec, HOUR_US, [11, 12], None, False)
            second.commit()

        t = threading.Thread(target=create_second)
        t.start()
        wait_until(lambda: blocked_on_lock(archiver, second.get_backend_pid()), "the second creator waits")
        first.commit()
        t.join(30)
        assert not t.is_alive()
    finally:
        first.close()
        second.close()
    assert out == {"first": {10: Tier.PRESENT, 11: Tier.PRESENT}, "second": {11: Tier.PRESENT, 12: Tier.PRESENT}}
    assert sorted(c.chunk_id for c in archiver.chunks("metrics")) == [10, 11, 12]
    assert sum(_creating_transactions(archiver)) == 3
    # each creator changed the catalog (10-11, then 12): the chunk set's version moves
    # once per creator that added a chunk, not for the chunk the second found made
    assert _chunks_version(archiver) == version + 2
    with archiver.db.connection(autocommit=False) as third, third.cursor() as cur:
        chunks_mod.create_chunks(cur, spec, HOUR_US, [10, 12], None, False)  # nothing new
    assert _chunks_version(archiver) == version + 2


def _chunks_version(archiver) -> int:
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT chunks_version FROM moirae_streams WHERE stream = 'metrics'")
        return cur.fetchone()[0]


def test_creation_does_not_wait_for_an_open_writer_of_the_table(archiver, job):
    """Another partition's COPY is open on the stream's table: this executor creates its
    new chunks and writes them meanwhile (a partition is attached, which leaves the
    writers' locks alone, :func:`archive.chunks.partition_ddl`), and the writer then goes
    on and commits. With ``CREATE TABLE .. PARTITION OF`` the executor waited here until
    the writer committed."""
    archiver.ensure_chunks("metrics", [473_352])
    writer = archiver.db.connect()
    result = {}
    try:
        with writer.cursor() as cur:
            cur.execute("INSERT INTO metrics (_sid, _batch, ts, host, v, n) VALUES (1, 1, %s, 'w', 0, 100)", (T0,))
        t = threading.Thread(target=lambda: result.update(
            res=write_partition(job, 0, partition_table(archiver, rows(3, step=timedelta(hours=1))))))
        t.start()
        t.join(30)
        assert not t.is_alive(), "the executor waited for the open writer"
        with writer.cursor() as cur:  # the writer goes on, into a chunk the executor created
            cur.execute("INSERT INTO metrics (_sid, _batch, ts, host, v, n) VALUES (2, 1, %s, 'w', 0, 101)",
                        (T0 + timedelta(hours=2),))
        writer.commit()
    finally:
        writer.close()
    assert result["res"] == (3, 0, False, [])
    assert table_rows(archiver)["n"].tolist() == [0, 1, 2, 100, 101]


def test_a_chunk_dropped_after_its_creation_is_reported_missing(archiver, job, monkeypatch):
    """Retention dropped the new chunk between its creation and the data transaction:
    nothing is written and the chunk is reported, for the driver to create again."""
    real = exec_sink.create_missing

    def then_dropped(conn, job_, ids):
        real(conn, job_, ids)
        with archiver.db.connection() as other, other.cursor() as cur:
            cur.execute("DROP TABLE metrics__c473352")
            cur.execute("UPDATE moirae_chunks SET dropped = true WHERE chunk_id = 473352")

    monkeypatch.setattr(exec_sink, "create_missing", then_dropped)
    part = partition_table(archiver, rows(3, step=timedelta(hours=1)))
    assert write_partition(job, 0, part) == (0, 0, False, [473_352])
    assert len(table_rows(archiver)) == 0
    monkeypatch.undo()
    archiver.ensure_chunks("metrics", [473_352])  # what the driver's fallback does
    assert write_partition(job, 0, part) == (3, 0, False, [])
    archiver.commit_parts("metrics", 1)
    assert catalog_rows(archiver) == partition_counts(archiver) == {473_352: 1, 473_353: 1, 473_354: 1}


def test_a_worker_keeps_the_connections_of_its_last_few_schemas_only(pg):
    """A Spark session outlives engines: a Python worker that wrote for many schemas in
    turn keeps the last MAX_KEPT_CONNECTIONS connections open and closes the older ones,
    on the server too (each schema had left one idle connection per worker)."""
    keep = exec_sink.MAX_KEPT_CONNECTIONS
    schemas = [f"{pg.schema}_w{i}" for i in range(keep + 2)]
    before = dict(exec_sink._CONNECTIONS)
    exec_sink._CONNECTIONS.clear()
    try:
        conns, pids = [], []
        for s in schemas:
            conns.append(exec_sink.worker_connection(pg.dsn, s))
            pids.append(conns[-1].get_backend_pid())
        assert [c.closed for c in conns] == [1, 1] + [0] * keep
        assert list(exec_sink._CONNECTIONS) == [(pg.dsn, s) for s in schemas[2:]]
        # reusing one makes it the most recent: the next new schema closes the oldest other
        assert exec_sink.worker_connection(pg.dsn, schemas[2]) is conns[2]
        extra = exec_sink.worker_connection(pg.dsn, f"{pg.schema}_w_extra")
        assert conns[3].closed and not conns[2].closed and not extra.closed
        def alive() -> set[int]:
            with pg.connection() as conn, conn.cursor() as cur:
                cur.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))
                return {p for (p,) in cur.fetchall()}

        # a closed connection's backend exits a moment after the client closed it
        wait_until(lambda: alive() == set(pids[2:]) - {pids[3]}, "closed connections leave the server", 10)
    finally:
        for key in list(exec_sink._CONNECTIONS):
            exec_sink.drop_worker_connection(*key)
        exec_sink._CONNECTIONS.update(before)


def test_a_worker_s_session_is_named_apart_from_the_driver_s(pg):
    """A DSN naming its application (the engine's, moirae.deploy.lifecycle.named_dsn)
    gives a worker's session that name plus ``/worker``, so leak checks can tell Spark's
    workers, which Spark starts and replaces on its own, from the driver's sessions."""
    from psycopg2.extensions import make_dsn

    def name(dsn: str) -> str:
        conn = exec_sink.connect(dsn, pg.schema)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()")
                return cur.fetchone()[0]
        finally:
            conn.close()

    assert name(make_dsn(pg.dsn, application_name="moirae:t_1")) == "moirae:t_1/worker"
    assert name(make_dsn(pg.dsn, application_name="m" * 63)) == "m" * 56 + "/worker"
    assert not name(make_dsn(pg.dsn, application_name="")).endswith("/worker")
