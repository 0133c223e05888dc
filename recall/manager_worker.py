"""The Recall Manager's workers: one thread and one connection per concurrent
history-query (M 4.4: "no more than a fixed number of historical queries execute
within the RDBMS at any time").

Each worker loops: under the manager's lock it asks the scheduler for the next quantum
(``choose``), then runs the chosen task's history-query over its next chunk on its own
connection, outside the lock, hands the rows to the operator, publishes the outputs and,
under the lock again, ``complete``\\ s the quantum with the number of rows (tickets are
deducted in proportion, M 4.4). ``in_query`` is set under the lock before the query and
cleared under the lock after it, so a cancelling thread that holds the lock and sees
``in_query`` knows the connection is busy with *that* task's query (or about to be).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg2.extensions

from recall.api import EndReason, Interval, Output
from recall.task import RecallTask, TaskStatus
from scheduler.events import TaskSuspended

log = logging.getLogger("recall.manager")


@dataclass
class Worker:
    name: str
    thread: threading.Thread | None = None
    conn: Any = None
    task: RecallTask | None = None
    in_query: bool = False
    backend_pid: int | None = None


class WorkerLoop:
    """Mixin of :class:`recall.manager.RecallManager`: the worker threads."""

    def _work(self, w: Worker) -> None:
        try:
            while True:
                try:
                    if not self._quantum(w):
                        return
                except Exception:  # a bug must not silently cost the manager a worker
                    log.exception("recall worker %s: unexpected error; continuing", w.name)
                    with self._cond:
                        w.task, w.in_query = None, False
        finally:
            self._close_conn(w)

    def _quantum(self, w: Worker) -> bool:
        """One scheduling round of worker ``w``; False when the manager closes."""
        if w.conn is not None and not clean_connection(w.conn):
            self._close_conn(w)
        with self._cond:
            while True:
                if self._closing:
                    return False
                # load: the fraction of history-query slots in use if this one is filled,
                # so a materialization task only takes a slot while at most half are busy
                # (M 4.4: lower priority "only when the system is lightly-loaded")
                busy = sum(1 for x in self._workers if x.task is not None)
                grant = self.scheduler.choose(load=(busy + 1) / self.max_concurrent)
                if grant is not None:
                    break
                self._cond.wait(0.5)
            task = self._tasks[grant.task_id]
            task.status = TaskStatus.RUNNING
            task.worker = w
            w.task = task
            w.in_query = True
            chunk_id = task.next_chunk
        assert chunk_id is not None  # a task leaves the scheduler when its chunks run out
        t0 = self.clock.now()
        rows = None
        error: str | None = None
        try:
            def step():
                fetch = getattr(task.description.recall_operator, "fetch_chunk", None)
                if fetch is not None:  # an operator that keeps its own per-chunk index (Similarity Recall)
                    return fetch(task.state, chunk_id, self._conn(w), self.timeout_ms)
                return self.store.run_history_query(task.spec.query, task.spec.params, chunk_id,
                                                    conn=self._conn(w), timeout_ms=self.timeout_ms)

            db = getattr(self.store, "db", None)
            # a server restart drops the worker's connection: reconnect with backoff and rerun
            # this chunk (a read-only query) instead of failing the task (archive.pg.Database.retry)
            rows = step() if db is None else db.retry(step, "history-query", on_lost=lambda: self._close_conn(w))
        except Exception as exc:
            error = f"history-query over chunk {chunk_id} failed: {type(exc).__name__}: {exc}".strip()
        with self._cond:
            w.in_query = False  # from here on no conn.cancel() may target this task
            stop = task.stop
        if error is not None and w.conn is not None and not clean_connection(w.conn):
            self._close_conn(w)
        outputs: list[Output] = []
        covered: Interval | None = None
        if stop is None and error is None:
            covered = task.covered(self.store.grid_for(task.spec.query.streams), chunk_id)
            try:
                outputs = list(task.description.recall_operator.on_chunk(task.state, chunk_id, covered, rows))
            except Exception as exc:
                error = f"operator {task.spec.operator!r} failed on chunk {chunk_id}: {type(exc).__name__}: {exc}"
        elapsed = self.clock.now() - t0
        n_rows = 0 if rows is None else len(rows)
        if stop is None and error is None:
            self._emit(task, outputs)
        with self._cond:
            task.time_spent += elapsed
            w.task = None
            task.worker = None
            if error is None and stop is None:
                task.next_index += 1
                task.rows += n_rows
                if task.first_chunk_at is None:
                    task.first_chunk_at = self.clock.now()
            end: EndReason | None = task.stop
            if end is not None:  # cancelled / discarded meanwhile: the scheduler forgets it
                self.scheduler.complete(task.task_id, results=n_rows)
            elif error is not None:
                task.error = error
                end = EndReason.FAILED
                self.scheduler.complete(task.task_id, results=0, done=True)
            else:
                done = task.next_chunk is None
                events = self.scheduler.complete(task.task_id, results=n_rows, done=done)
                if done:
                    end = EndReason.DONE
                elif any(isinstance(e, TaskSuspended) for e in events):
                    task.status = TaskStatus.SUSPENDED
                else:
                    task.status = TaskStatus.RUNNABLE
            if end is not None:
                task.status = TaskStatus.ENDING
            self._cond.notify_all()
        if end is not None:
            if end is EndReason.FAILED:
                log.warning("recall task %s (event %s) failed: %s", task.task_id, task.spec.eid, error)
            self._end(task, end)
        return True

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
