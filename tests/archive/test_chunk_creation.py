"""Creating chunks never takes more than a bounded number of locks in one transaction
(issue 12: a year of hourly chunks created in one transaction ran PostgreSQL out of
shared memory for locks), and a batch too wide for one transaction is refused by name."""

from __future__ import annotations

from datetime import timedelta

import pytest

from archive import chunks as chunks_mod
from archive.errors import BatchTooWide
from tests.archive.arch_helpers import rows

pytestmark = pytest.mark.postgres


def _partitions_per_creating_transaction(arch, stream: str) -> list[int]:
    """How many of the stream's partitions each transaction created (a partition's
    pg_class row carries its creating transaction as xmin)."""
    with arch.db.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = %s::regclass GROUP BY c.xmin::text::bigint", (stream,))
        return sorted(n for (n,) in cur.fetchall())


def test_a_batch_opening_hundreds_of_chunks_creates_them_in_bounded_transactions(archiver, monkeypatch):
    monkeypatch.setattr(chunks_mod, "CHUNKS_PER_TRANSACTION", 16)
    frame = rows(300, step=timedelta(hours=1))  # one row in each of 300 hourly chunks
    res = archiver.append("metrics", 1, frame, bulk=True)
    assert res.rows == 300 and len(res.chunks) == 300
    per_tx = _partitions_per_creating_transaction(archiver, "metrics")
    assert sum(per_tx) == 300
    assert max(per_tx) <= 16 and len(per_tx) >= 300 // 16
    assert len(archiver.chunks("metrics")) == 300
    assert len(archiver.read("metrics", frame.ts.min(), frame.ts.max() + timedelta(hours=1))) == 300


def test_a_batch_wider_than_one_transaction_may_lock_is_refused_by_name(archiver, monkeypatch):
    monkeypatch.setattr(chunks_mod, "MAX_CHUNKS_PER_BATCH", 10)
    with pytest.raises(BatchTooWide, match=r"batch 7 of stream 'metrics' spans 11 chunks"):
        archiver.append("metrics", 7, rows(11, step=timedelta(hours=1)))
    assert archiver.batch_ids("metrics") == []  # nothing recorded: the batch can be sent again, split
    assert archiver.append("metrics", 7, rows(10, step=timedelta(hours=1))).rows == 10
