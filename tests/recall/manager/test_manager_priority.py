"""History work yields the CPU to the live path (recall.priority): each history thread
lowers its own OS priority, never the process's and never another thread's; the
Recall Manager's workers, the results writer and the similarity index builder run at
the niceness they are given, and still do their work there."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from recall_mgr_helpers import Collector, Recorder, event, wait_until

from recall.manager import RecallManager
from recall.outputs import ResultsTable
from recall.priority import check_nice, lower_thread_priority, thread_nice
from recall.similarity_prebuild import IndexPrebuilder

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux threads have a niceness each")


def _mine() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_thread(fn):
    out = {}

    def run():
        out["result"] = fn()
        out["nice"] = _mine()

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    return out


def _settled(threads, want: int, timeout: float = 10.0) -> list[int | None]:
    """The threads' niceness once each reached ``want`` (or whatever it is at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        got = [thread_nice(t.native_id) for t in threads]
        if all(g == want for g in got) or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


@pytest.mark.parametrize("bad", [20, -1, True, 2.5, "5", None])
def test_a_niceness_outside_0_to_19_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=f"nice must be an integer from 0 to 19, got {bad!r}"):
        check_nice(bad)
    with pytest.raises(ValueError, match="nice must be"):
        RecallManager(None, nice=bad)


@linux
def test_a_thread_lowers_its_own_priority_only_and_never_raises_it():
    base = _mine()
    if base >= 18:
        pytest.skip(f"this process already runs at niceness {base}")
    target = base + 1 + (19 - base) // 2
    got = _in_thread(lambda: lower_thread_priority(target))
    assert got == {"result": target, "nice": target}
    assert _mine() == base and os.getpriority(os.PRIO_PROCESS, 0) == base, "the caller and the process keep theirs"
    # a second, lower value does not raise it back; 0 leaves it alone
    got = _in_thread(lambda: (lower_thread_priority(target), lower_thread_priority(base + 1),
                              lower_thread_priority(0)))
    assert got == {"result": (target, target, None), "nice": target}


@linux
@pytest.mark.postgres
def test_history_threads_run_at_the_niceness_given_and_still_do_their_work(archive, pg):
    base = _mine()
    if base >= 18:
        pytest.skip(f"this process already runs at niceness {base}")
    nice = base + 1 + (19 - base) // 2
    results = ResultsTable(pg, nice=nice)
    indexes = IndexPrebuilder(nice=nice)
    indexes.start()
    out = Collector()
    mgr = RecallManager(archive, max_concurrent=2, on_output=[results.append, out], nice=nice)
    plain = RecallManager(archive, max_concurrent=1)  # nice=0: the caller's priority
    try:
        workers = [w.thread for w in mgr._workers]
        assert _settled([*workers, results._thread, indexes._thread], nice) == [nice] * 4
        assert _settled([plain._workers[0].thread], base) == [base]
        assert _mine() == base, "the thread that built them keeps its priority"
        rec = Recorder(archive)
        mgr.register(rec)
        mgr.submit(event("e1", chunk=4, host="b"), "rec")
        assert wait_until(lambda: "e1" not in mgr.open_events(), timeout=30), "a niced worker runs its task to the end"
        assert len(rec.chunks_of("e1")) == 5 and list(rec.ends()) == ["e1"]
        assert results.flush(30) and results.errors == 0
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM moirae_recall_outputs WHERE eid = 'e1'")
            assert cur.fetchone()[0] == len(out.of("e1")) > 0
    finally:
        mgr.close()
        plain.close()
        indexes.stop()
        results.close()
