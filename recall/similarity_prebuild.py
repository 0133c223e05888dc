"""Similarity indexes built in the background when chunks become final.

M 3.5: the TF of a context "can be computed once and stored with the context"; M 4.2:
"While materializing past events and contexts, Moirae can optionally index the resulting
materialized views". An :class:`IndexPrebuilder` does that for every registered
Similarity Recall operator: when chunks of one of its streams are demoted out of the
present tier or rewritten by a materialization (:func:`archive.simindex.ready`), it
queues them and one worker thread builds and persists their indexes
(:meth:`recall.similarity_source.ChunkSource.prebuild_one`), newest chunk first, off the
live micro-batch path. An event's task that reaches such a chunk then only loads it (or
waits on the chunk's lock for the build under way); a chunk still present in another
stream of the operator is skipped and queued again when that stream seals it.

Bounded: at most ``max_pending`` chunks wait (the oldest are dropped; they are built on
first use as before). A failed build is logged and counted, never raised. :meth:`stop`
lets the build under way finish, drops the queue and joins the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from archive import simindex

log = logging.getLogger(__name__)


class IndexPrebuilder:
    """One background worker building the chunk indexes of registered operators."""

    def __init__(self, max_pending: int = 10_000) -> None:
        self.max_pending = max_pending
        self._ops: list[Any] = []
        self._pending: dict[tuple[int, int], Any] = {}  # (chunk_id, operator slot) -> operator
        self._cond = threading.Condition()
        self._busy = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._conns: dict[int, Any] = {}  # id(archiver) -> the worker's connection to it
        self.built = self.skipped = self.failed = self.dropped = 0
        self.last_error: str | None = None
        self._listening = False

    # -- what to build ------------------------------------------------------------------

    def add(self, op: Any) -> None:
        """Build the indexes of ``op`` (a :class:`~recall.similarity_recall.SimilarityRecall`)."""
        with self._cond:
            if op not in self._ops:
                self._ops.append(op)
            if not self._listening:  # told of final chunks from the first operator on
                simindex.listen_ready(self._on_ready)
                self._listening = True

    def remove(self, op: Any, timeout: float = 30.0) -> None:
        """Stop building ``op``'s indexes (its operator was undeployed): its queued chunks
        are dropped and a build of it under way is waited for."""
        with self._cond:
            if op not in self._ops:
                return
            self._ops.remove(op)
            self._pending = {(key[0], self._ops.index(o)): o for key, o in self._pending.items() if o is not op}
            self._cond.wait_for(lambda: not self._busy, timeout)

    def _on_ready(self, arch: Any, stream: str, chunk_ids: Sequence[int]) -> None:
        with self._cond:
            ops = [op for op in self._ops if op.store is arch and stream in op.source.streams]
        for op in ops:
            self.request(op, _task_chunks(op, stream, chunk_ids))

    def request(self, op: Any, chunk_ids: Sequence[int]) -> None:
        """Queue chunks of ``op``'s task grid for a background build."""
        with self._cond:
            slot = self._ops.index(op) if op in self._ops else None
            if slot is None or self._stop:
                return
            for c in chunk_ids:
                self._pending[(int(c), slot)] = op
            while len(self._pending) > self.max_pending:  # the oldest chunks wait for their first use
                del self._pending[min(self._pending)]
                self.dropped += 1
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + (1 if self._busy else 0)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or being built (False when ``timeout`` passed first)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    # -- the worker ---------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="moirae-simindex-build", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the build under way, drop what is queued, join the worker (idempotent)."""
        with self._cond:
            self._stop = True
            self._pending.clear()
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("similarity index builder did not stop within %.0f s", timeout)
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:  # noqa: BLE001 (closing a broken connection)
                pass
        self._conns.clear()

    def close(self) -> None:
        self.stop()
        simindex.unlisten_ready(self._on_ready)
        self._listening = False

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stop)
                if self._stop:
                    self._cond.notify_all()
                    return
                key = max(self._pending)  # the newest chunk first: tasks read newest first
                op = self._pending.pop(key)
                self._busy = True
            try:
                self._build(op, key[0])
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _build(self, op: Any, chunk_id: int) -> None:
        conn = None
        try:
            conn = self._conns.get(id(op.store))
            if conn is None or conn.closed:
                conn = self._conns[id(op.store)] = op.store.connect()
            if op.source.prebuild_one(chunk_id, conn):
                self.built += 1
            else:
                self.skipped += 1
        except Exception as exc:  # logged and counted; the chunk is built on first use instead
            self.failed += 1
            self.last_error = f"{op.name} chunk {chunk_id}: {type(exc).__name__}: {exc}"
            log.warning("similarity index of %r chunk %s: background build failed (%s); it is built on first "
                        "use instead", op.name, chunk_id, " ".join(str(exc).split()))
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
                self._conns.pop(id(op.store), None)

    def stats(self) -> dict[str, Any]:
        return {"pending": self.pending(), "built": self.built, "skipped": self.skipped, "failed": self.failed,
                "dropped": self.dropped, "last_error": self.last_error}


def _task_chunks(op: Any, stream: str, chunk_ids: Sequence[int]) -> list[int]:
    """``stream``'s chunks (its own grid) as chunks of ``op``'s task grid (its streams'
    coarsest interval; the grids nest, so each lies in exactly one)."""
    arch = op.store
    own = arch.grid_of(stream)
    grid = arch.grid_for(op.query.streams)
    return sorted({grid.chunk_of(own.bounds(c)[0]) for c in chunk_ids})
