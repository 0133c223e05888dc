"""Creating chunks never takes more than a bounded number of locks in one transaction
(a year of hourly chunks created in one transaction ran PostgreSQL out of
shared memory for locks). A batch too wide for one transaction is written in pieces:
tests/archive/test_batch_pieces.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from archive import chunks as chunks_mod
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
