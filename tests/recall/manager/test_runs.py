"""A quantum that reads a run of chunks (:class:`recall.abc.ChunkRunFetcher`): the task
advances by the run, its covered interval spans it, and the run never passes the point
where the task suspends for feedback (the policy counts the run's chunks)."""

from __future__ import annotations

import pandas as pd
import pytest

from recall.abc import ChunkRunFetcher
from recall.manager import RecallManager
from recall.task import TaskStatus
from scheduler.clock import ManualClock
from tests.recall.manager.recall_mgr_helpers import SPAN, T0, Recorder, event, wait_until

pytestmark = pytest.mark.postgres


class RunRecorder(Recorder):
    """Reads up to ``run`` chunks per quantum, their history-query rows together."""

    def __init__(self, store, run: int = 3, **kw) -> None:
        super().__init__(store, **kw)
        self.store, self.run = store, run
        self.offered: list[list[int]] = []

    def fetch_chunk(self, state, chunk_id, conn=None, timeout_ms=None):
        return self.store.run_history_query(self.query, state["spec"].params, chunk_id, conn=conn)

    def fetch_run(self, state, chunk_ids, conn=None, timeout_ms=None):
        self.offered.append(list(chunk_ids))
        n = min(self.run, len(chunk_ids))
        return n, pd.concat([self.fetch_chunk(state, c, conn) for c in chunk_ids[:n]], ignore_index=True)


def test_runs_advance_the_task_and_stop_at_its_feedback_period(archive):
    clock = ManualClock(100.0)
    rec = RunRecorder(archive, run=3, feedback_period=5, feedback_timeout=10.0)
    assert isinstance(rec, ChunkRunFetcher)
    with RecallManager(archive, max_concurrent=1, clock=clock) as mgr:
        mgr.register(rec)
        [tid] = mgr.submit(event("e1", chunk=5), "rec")  # six one-hour chunks, newest first
        assert wait_until(lambda: mgr.task(tid).state is TaskStatus.SUSPENDED)
        first = archive.grid.chunk_of(T0)
        chunks = [first + i for i in range(5, -1, -1)]
        assert [len(o) for o in rec.offered] == [5, 2]  # the second run is offered only what the period leaves
        assert rec.chunks_of("e1") == [chunks[2], chunks[4]]  # each run is handed over once, as its oldest chunk
        v = mgr.task(tid)
        assert v.chunks_done == 5 and v.rows == 5 * 5  # host a: five rows per chunk
        assert v.covered.start == T0 + SPAN and v.covered.end == T0 + 6 * SPAN
        assert mgr.feedback("e1") == [tid]
        assert wait_until(lambda: mgr.task(tid).state is TaskStatus.DONE)
        assert mgr.task(tid).chunks_done == 6 and rec.chunks_of("e1")[-1] == chunks[5]
