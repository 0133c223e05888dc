"""The event log's ``recall_ended`` marks on a real PostgreSQL: committed when
``mark_ended`` returns, queued inside ``deferred`` and committed once on leaving it,
shared commits across threads, one kept connection closed by ``close``."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from moirae.ingest.events import EventLog, EventRecord

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _open(pg) -> set[str]:
    # a separate session: sees only what was committed
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT eid FROM moirae_events WHERE NOT recall_ended")
        return {r[0] for r in cur.fetchall()}


def _log(pg, n: int) -> EventLog:
    log = EventLog(pg)
    log.add([EventRecord("ev", f"e{i}", T0, {"i": i}) for i in range(n)])
    return log


def test_mark_ended_is_committed_on_return(pg):
    log = _log(pg, 3)
    log.mark_ended("e1")
    assert _open(pg) == {"e0", "e2"}
    assert {r.eid for r in log.open_events()} == {"e0", "e2"}  # what a restart resumes
    log.mark_ended("e1")  # again: a no-op, not an error
    log.mark_ended("unknown")
    assert _open(pg) == {"e0", "e2"}
    log.close()


def test_deferred_block_commits_once_on_exit(pg):
    log = _log(pg, 5)
    with log.deferred():
        for i in range(4):
            log.mark_ended(f"e{i}")
        assert _open(pg) == {f"e{i}" for i in range(5)}, "queued, not yet committed"
        with log.deferred():  # nested: the outer block commits
            log.mark_ended_many(["e0"])
        assert len(_open(pg)) == 5
    assert _open(pg) == {"e4"}
    log.close()


def test_deferred_block_commits_also_when_it_raises(pg):
    log = _log(pg, 2)
    with pytest.raises(RuntimeError), log.deferred():
        log.mark_ended("e0")
        raise RuntimeError("boom")
    assert _open(pg) == {"e1"}
    log.close()


def test_threads_marking_at_once_all_commit_on_one_kept_connection(pg):
    log = _log(pg, 200)
    pids: set[int] = set()

    def mark(lo: int) -> None:
        for i in range(lo, lo + 50):
            log.mark_ended(f"e{i}")
        pids.add(log._ended._conn.get_backend_pid())

    threads = [threading.Thread(target=mark, args=(k * 50,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _open(pg) == set()
    assert len(pids) == 1, "one connection for every end mark"
    pid = pids.pop()
    log.close()
    assert _gone_soon(pg, pid), "close() leaves the kept connection's backend behind"


def _gone_soon(pg, pid: int) -> bool:
    deadline = time.monotonic() + 5  # a closed backend leaves pg_stat_activity asynchronously
    while time.monotonic() < deadline:
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            if cur.fetchone()[0] == 0:
                return True
        time.sleep(0.05)
    return False
