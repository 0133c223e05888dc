"""Connections reused between units of work (archive.pool), on both servers.

A unit that ended cleanly gives its connection back; the next one gets the same server
process, unless the server ended it meanwhile, the unit failed, or it left a
transaction open."""

from __future__ import annotations

import os
import threading
import time

import psycopg2
import pytest

from archive import Archiver
from archive.pool import IdlePool


def _pid(db) -> int:
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def _alive(dsn: str, pid: int) -> bool:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            return cur.fetchone()[0] == 1
    finally:
        conn.close()


def test_a_clean_unit_of_work_gives_its_connection_to_the_next(pg):
    before = pg.connections_made()
    first = _pid(pg)
    assert [_pid(pg) for _ in range(5)] == [first] * 5
    assert pg.connections_made() - before <= 1


def test_a_connection_the_server_ended_while_idle_is_not_handed_out(pg):
    victim = _pid(pg)
    killer = psycopg2.connect(pg.dsn)  # outside the pool, which would hand out the victim itself
    try:
        with killer.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (victim,))
            assert cur.fetchone()[0] is True
    finally:
        killer.close()
    deadline = time.monotonic() + 5
    while _alive(pg.dsn, victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    # every idle connection is checked before use: a dead one would raise here
    for _ in range(3):
        assert _pid(pg) != victim


def test_a_failed_unit_of_work_closes_its_connection(pg):
    with pytest.raises(psycopg2.errors.DivisionByZero):
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            failed = cur.fetchone()[0]
            cur.execute("SELECT 1 / 0")
    assert _pid(pg) != failed


def test_transaction_state_does_not_reach_the_next_user(pg):
    with pg.connection(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 1234")
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid(), current_setting('statement_timeout')")
        again, timeout = cur.fetchone()
    assert again == pid and timeout != "1234ms"
    # a unit that leaves a transaction open (autocommit on, an explicit BEGIN) is not kept
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT pg_backend_pid()")
        open_tx = cur.fetchone()[0]
    assert _pid(pg) != open_tx


def test_the_pool_keeps_a_bounded_number_and_close_ends_them(pg):
    barrier = threading.Barrier(7)
    pids: list[int] = []

    def unit():
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pids.append(cur.fetchone()[0])
            barrier.wait(timeout=30)  # all seven at once: seven connections in use

    threads = [threading.Thread(target=unit) for _ in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pids)) == 7
    pool = pg._pools[True]
    assert pool.idle() == pool.keep < 7
    pg.close()
    assert pool.idle() == 0
    deadline = time.monotonic() + 5
    while any(_alive(pg.dsn, p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pg.dsn, p) for p in pids)


def test_the_archiver_shares_the_pool(pg):
    arch = Archiver(pg)
    made = pg.connections_made()
    for _ in range(5):
        arch.streams()
        arch.batch_done("nothing", 0)
    assert pg.connections_made() - made <= 1
    arch.close()
    assert pg._pools[True].idle() == 0


def test_idle_connections_past_their_age_are_closed_not_reused(pg_dsn):
    made: list = []

    def connect():
        made.append(psycopg2.connect(pg_dsn))
        return made[-1]

    pool = IdlePool(connect, keep=2, max_idle_s=0.05)
    first = pool.get()
    pool.put(first)
    time.sleep(0.1)
    second = pool.get()
    assert second is not first and first.closed
    pool.put(second)
    pool.close()
    assert second.closed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_use_or_close_the_parents_connections(pg):
    parent = _pid(pg)
    pid = os.fork()
    if pid == 0:  # the child: must not touch the parent's idle connection
        code = 1
        try:
            code = 0 if _pid(pg) != parent else 3
            pg.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _pid(pg) == parent  # still open and reused in the parent
