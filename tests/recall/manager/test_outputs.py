"""The results table (``moirae_recall_outputs``): batched writes, read-back, and retry
after a failed write (nothing the manager published is lost)."""

from __future__ import annotations

import pytest

from recall.api import Interval, Output, OutputKind
from recall.outputs import DDL, TABLE, StoredOutputs
from tests.recall.manager.recall_mgr_helpers import SPAN, T0, wait_until

pytestmark = pytest.mark.postgres


def _out(eid: str, seq: int, kind=OutputKind.INSERT, **row) -> Output:
    return Output("op", eid, T0, kind, seq, f"k{seq}", row, Interval(T0 - SPAN, T0))


def test_batches_are_written_and_read_back(pg):
    table = StoredOutputs(pg, batch_size=7, flush_interval=0.05)
    try:
        for i in range(1, 51):
            table.append(_out("e1" if i % 2 else "e2", i, v=i * 1.5, label="x'; DROP TABLE t; --"))
        assert table.flush() and table.pending == 0
        got = table.read(eid="e1")
        assert [o.seq for o in got] == list(range(1, 51, 2))
        assert got[0].row == {"v": 1.5, "label": "x'; DROP TABLE t; --"}
        assert got[0].covered == Interval(T0 - SPAN, T0) and got[0].kind is OutputKind.INSERT
        assert len(table.read()) == 50 and table.errors == 0
    finally:
        table.close()


def test_a_failed_write_is_retried_not_lost(pg):
    table = StoredOutputs(pg, batch_size=10, flush_interval=0.05)
    try:
        table.append(_out("e1", 1))
        assert table.flush()
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE {TABLE}")
        for i in range(2, 6):
            table.append(_out("e1", i))
        assert wait_until(lambda: table.errors >= 1)
        assert not table.flush(timeout=0.2) and table.pending == 4
        assert "moirae_recall_outputs" in table.last_error
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)
        assert table.flush(timeout=30)
        assert [o.seq for o in table.read(eid="e1")] == [2, 3, 4, 5]
    finally:
        table.close()
    with pytest.raises(RuntimeError):
        table.append(_out("e1", 9))
