"""The Recall Manager's worker pool: one thread and one connection per concurrent
history-query (M 4.4: "no more than a fixed number of historical queries execute
within the RDBMS at any time").

Each worker loops: under the manager's lock it asks the scheduler for the next quantum
(``choose``), then runs the chosen task's history-query over its next chunk on its own
connection, outside the lock, hands the rows to the operator, publishes the outputs and,
under the lock again, ``complete``\\ s the quantum with the number of rows (tickets are
deducted in proportion, M 4.4). An operator that reads chunks itself may read a run of
the task's next chunks in one quantum (:class:`recall.abc.ChunkRunFetcher`), never past
the point where the task suspends for feedback; the quantum then counts as that many
chunks. ``in_query`` is set under the lock before the query and
cleared under the lock after it, so a cancelling thread that holds the lock and sees
``in_query`` knows the connection is busy with *that* task's query (or about to be).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg2.extensions

from archive.abc import ChunkStore
from recall.abc import ChunkFetcher, ChunkRunFetcher
from recall.api import EndReason, Interval, Output
from recall.manager_state import ManagerState, TaskLifecycle
from recall.replica2 import HistoryListener, HistoryReplica, ReplicaStep, SearchProgress
from recall.replica2 import step as replica_step
from recall.task import RecallTask, TaskStatus
from scheduler.events import QuantumGranted, TaskSuspended

log = logging.getLogger("recall.manager")
#: chunks one quantum of a :class:`~recall.abc.ChunkRunFetcher` is offered at most
MAX_RUN = 64


@dataclass
class Worker:
    """One worker thread, its connection and the task it runs (read under the lock)."""

    name: str
    thread: threading.Thread | None = None
    conn: Any = None
    task: RecallTask | None = None
    in_query: bool = False
    backend_pid: int | None = None
    run_limit: int = 1  # chunks the task's quantum may read (set with the grant)


@dataclass
class _Run:
    """What one quantum produced: the rows, the operator's outputs, or the error."""

    chunk_id: int | None  # the chunk read (the oldest, when a run of chunks was read)
    rows: Any = None
    first: int | None = None  # the newest chunk read
    steps: int = 1  # chunks read
    outputs: list[Output] | None = None
    error: str | None = None
    stop: EndReason | None = None
    replica: bool = False  # a replica2 quantum (recall.replica2): raw history re-processed
    step: ReplicaStep | None = None
    new_chunks: list[int] | None = None

    @property
    def n_rows(self) -> int:
        return 0 if self.rows is None else len(self.rows)


class WorkerPool:
    """``max_concurrent`` worker threads, each with its own connection from ``store``.

    The pool reads and writes the shared ``state`` under its lock, publishes outputs
    through ``lifecycle.publisher`` and ends tasks through ``lifecycle``. ``timeout_ms``
    is the statement timeout of each history-query.
    """

    def __init__(self, state: ManagerState, lifecycle: TaskLifecycle, store: ChunkStore, *,
                 max_concurrent: int, timeout_ms: int | None) -> None:
        self.state = state
        self.lifecycle = lifecycle
        self.store = store
        self.max_concurrent = max_concurrent
        self.timeout_ms = timeout_ms
        self.workers = [Worker(f"moirae-recall-{i}") for i in range(max_concurrent)]
        #: the engine's raw-history re-processing (replica2, :mod:`recall.replica2`), if any
        self.replica: HistoryReplica | None = None
        #: raw units one replica quantum re-processes at most (1, 2, 4, ... up to this)
        self.replica_units = 16

    def start(self) -> None:
        for w in self.workers:
            w.thread = threading.Thread(target=self._work, args=(w,), name=w.name, daemon=True)
            w.thread.start()

    def join(self, timeout: float) -> None:
        for w in self.workers:
            if w.thread is not None:
                w.thread.join(timeout)

    def connections(self) -> list[int]:
        """Backend pids of the workers' open connections (at most ``max_concurrent``)."""
        with self.state.cond:
            return [w.backend_pid for w in self.workers if w.conn is not None and w.backend_pid is not None]

    def running(self) -> int:
        """History-queries in flight now."""
        with self.state.cond:
            return sum(1 for w in self.workers if w.in_query)

    def threads(self) -> list[threading.Thread]:
        return [w.thread for w in self.workers if w.thread is not None and w.thread.is_alive()]

    # -- the loop ------------------------------------------------------------------
    def _work(self, w: Worker) -> None:
        try:
            while True:
                try:
                    if not self.quantum(w):
                        return
                except Exception:  # a bug must not silently cost the manager a worker
                    log.exception("recall worker %s: unexpected error; continuing", w.name)
                    with self.state.cond:
                        w.task, w.in_query = None, False
        finally:
            self._close_conn(w)

    def quantum(self, w: Worker) -> bool:
        """One scheduling round of worker ``w``: take a quantum, run the task's
        history-query over its next chunk, hand the rows to its operator, publish the
        outputs and complete the quantum. False when the manager closes."""
        if w.conn is not None and not clean_connection(w.conn):
            self._close_conn(w)
        task = self._take(w)
        if task is None:
            return False
        t0 = self.state.clock.now()
        if task.next_chunk is None:  # its chunks are read, raw history remains: replica2
            run = self._replica(w, task)
        else:
            run = self._query(w, task)
            if run.stop is None and run.error is None:
                self._apply(task, run)
        elapsed = self.state.clock.now() - t0
        if run.stop is None and run.error is None:
            self.lifecycle.publisher.emit(task, run.outputs or [])
        end = self._complete(w, task, run, elapsed)
        if end is not None:
            if end is EndReason.FAILED:
                log.warning("recall task %s (event %s) failed: %s", task.task_id, task.spec.eid, run.error)
            self.lifecycle.end(task, end)
        return True

    def _take(self, w: Worker) -> RecallTask | None:
        """Wait for the policy to grant a quantum; the granted task, marked running on
        ``w`` (None when the manager closes)."""
        st = self.state
        with st.cond:
            while True:
                if st.closing:
                    return None
                grant = self._choose()
                if grant is not None:
                    break
                st.cond.wait(0.5)
            task = st.tasks[grant.task_id]
            left = st.scheduler.steps_left(grant.task_id)
            w.run_limit = MAX_RUN if left is None else max(1, min(MAX_RUN, left))
            task.status = TaskStatus.RUNNING
            task.worker = w
            w.task = task
            w.in_query = True
            return task

    def _choose(self) -> QuantumGranted | None:
        # load: the fraction of history-query slots in use if this one is filled,
        # so a materialization task only takes a slot while at most half are busy
        # (M 4.4: lower priority "only when the system is lightly-loaded")
        busy = sum(1 for x in self.workers if x.task is not None)
        return self.state.scheduler.choose(load=(busy + 1) / self.max_concurrent)

    def _query(self, w: Worker, task: RecallTask) -> _Run:
        """Run the task's history-query over its next chunk on ``w``'s connection."""
        chunk_id = task.next_chunk
        assert chunk_id is not None  # a task leaves the scheduler when its chunks run out
        run = _Run(chunk_id, first=chunk_id)

        op = task.description.recall_operator
        ids = task.chunks[task.next_index:task.next_index + w.run_limit]

        def step():
            if len(ids) > 1 and isinstance(op, ChunkRunFetcher):  # a run of small chunks, as one
                n, rows = op.fetch_run(task.state, ids, self._conn(w), self.timeout_ms)
                run.steps = max(1, min(int(n), len(ids)))
                run.chunk_id = ids[run.steps - 1]
                return rows
            if isinstance(op, ChunkFetcher):  # an operator that keeps its own per-chunk index (Similarity Recall)
                return op.fetch_chunk(task.state, chunk_id, self._conn(w), self.timeout_ms)
            return self.store.run_history_query(task.spec.query, task.spec.params, chunk_id,
                                                conn=self._conn(w), timeout_ms=self.timeout_ms)

        try:
            # a server restart drops the worker's connection: reconnect with backoff and rerun
            # this chunk (a read-only query) instead of failing the task (archive.pg.Database.retry)
            run.rows = self.store.retry(step, "history-query", on_lost=lambda: self._close_conn(w))
        except Exception as exc:
            run.error = f"history-query over chunk {chunk_id} failed: {type(exc).__name__}: {exc}".strip()
        with self.state.cond:
            w.in_query = False  # from here on no conn.cancel() may target this task
            run.stop = task.stop
        if run.error is not None and w.conn is not None and not clean_connection(w.conn):
            self._close_conn(w)
        return run

    def _replica(self, w: Worker, task: RecallTask) -> _Run:
        """A replica2 quantum of ``task`` (M 4.4: the task migrates onto the replica with its
        tickets): re-process the raw history just older than what it has searched, a
        growing number of units per quantum, and find the chunks that now hold its data.
        Outside the lock; the task's bookkeeping changes in :meth:`_complete`."""
        run = _Run(None, replica=True)
        replica = self.replica
        before = task.history_before
        try:
            if replica is None or before is None:
                raise RuntimeError("no raw-history replica is configured")
            units = min(self.replica_units, 2 ** min(task.replica_steps, 16))
            run.step, run.new_chunks = replica_step(replica, self.store, task.spec, before, task.chunks, units)
        except Exception as exc:
            run.error = (f"re-processing raw history before {before} failed: {type(exc).__name__}: {exc}").strip()
        with self.state.cond:
            w.in_query = False
            run.stop = task.stop
        op = task.description.recall_operator
        if run.error is None and run.stop is None and isinstance(op, HistoryListener):
            start = task.history_before if run.step is None else run.step.start
            back = min(t for t in (task.covered_start, start) if t is not None)
            progress = SearchProgress(back, task.materialized_until, 0 if run.step is None else run.step.remaining
                                      + len(task.chunks) - task.next_index + len(run.new_chunks or ()),
                                      task.reprocessed + (run.step.reprocessed if run.step else 0))
            try:
                run.outputs = list(op.on_history(task.state, progress))
            except Exception as exc:
                run.error = f"operator {task.spec.operator!r} failed on its search progress: {type(exc).__name__}: {exc}"
        return run

    def _apply(self, task: RecallTask, run: _Run) -> None:
        """Hand the chunk's rows to the task's operator (outside the lock)."""
        grid = self.store.grid_for(task.spec.query.streams)
        if run.steps > 1 and run.first is not None:
            task.covered(grid, run.first)
        covered: Interval = task.covered(grid, run.chunk_id)
        try:
            run.outputs = list(task.description.recall_operator.on_chunk(task.state, run.chunk_id, covered,
                                                                         run.rows))
        except Exception as exc:
            run.error = (f"operator {task.spec.operator!r} failed on chunk {run.chunk_id}: "
                         f"{type(exc).__name__}: {exc}")

    def _complete(self, w: Worker, task: RecallTask, run: _Run, elapsed: float) -> EndReason | None:
        """Under the lock: complete the quantum (tickets are deducted in proportion to
        the rows, M 4.4) and update the task's statistics; how the task ends, if it does."""
        st = self.state
        with st.cond:
            task.time_spent += elapsed
            w.task = None
            task.worker = None
            if run.error is None and run.stop is None and run.replica:
                task.replica_steps += 1
                if run.step is None:
                    task.history_remaining = 0
                else:
                    task.chunks.extend(run.new_chunks or ())
                    task.history_before = run.step.start
                    task.history_remaining = run.step.remaining
                    task.reprocessed += run.step.reprocessed
            elif run.error is None and run.stop is None:
                task.next_index += run.steps
                task.rows += run.n_rows
                if task.first_chunk_at is None:
                    task.first_chunk_at = st.clock.now()
            end: EndReason | None = task.stop
            if end is not None:  # cancelled / discarded meanwhile: the scheduler forgets it
                st.scheduler.complete(task.task_id, results=run.n_rows)
            elif run.error is not None:
                task.error = run.error
                end = EndReason.FAILED
                st.scheduler.complete(task.task_id, results=0, done=True)
            else:
                done = task.next_chunk is None and not task.more_history
                events = st.scheduler.complete(task.task_id, results=run.n_rows, done=done, steps=run.steps)
                if done:
                    end = EndReason.DONE
                elif any(isinstance(e, TaskSuspended) for e in events):
                    task.status = TaskStatus.SUSPENDED
                else:
                    task.status = TaskStatus.RUNNABLE
            if end is not None:
                task.status = TaskStatus.ENDING
            st.cond.notify_all()
            return end

    def _conn(self, w: Worker) -> Any:
        if w.conn is None or getattr(w.conn, "closed", False):
            w.conn = self.store.connect()
            try:
                w.backend_pid = w.conn.get_backend_pid()
            except Exception:  # not a psycopg2 connection: fine, only used for introspection
                w.backend_pid = None
        return w.conn

    @staticmethod
    def _close_conn(w: Worker) -> None:
        conn, w.conn, w.backend_pid = w.conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def clean_connection(conn: Any) -> bool:
    """Make a worker's connection ready for the next history-query; False if it must be
    thrown away. A cancelled query can leave the session inside a transaction block
    (e.g. when a repeated cancel lands on the store's own ``ROLLBACK``); that is rolled
    back here so the *next* task on this connection does not fail for it.
    """
    if getattr(conn, "closed", False):
        return False
    try:
        status = conn.get_transaction_status()
    except AttributeError:  # not a psycopg2 connection: trust the store
        return True
    except Exception:
        return False
    if status == psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        return True
    if status in (psycopg2.extensions.TRANSACTION_STATUS_INTRANS, psycopg2.extensions.TRANSACTION_STATUS_INERROR):
        try:
            if conn.autocommit:
                with conn.cursor() as cur:
                    cur.execute("ROLLBACK")
            else:
                conn.rollback()
            return conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        except Exception:
            return False
    return False  # ACTIVE or UNKNOWN: the session is not in a known state
