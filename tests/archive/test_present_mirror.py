"""The present tier is held in memory as it is written (M 4.1), not only after a read,
and the memory copy always equals what PostgreSQL holds."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive import Archiver, ArchiveSettings, StreamSpec

pytestmark = pytest.mark.postgres


def test_new_present_chunks_are_mirrored_on_write(pg):
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    try:
        arch.register_stream(StreamSpec.build("m", "ts", {"v": "bigint"}))
        ts = pd.date_range("2024-01-01 00:30", periods=4, freq="20min", tz="UTC")  # chunks 0 and 1
        arch.append("m", 0, pd.DataFrame({"ts": ts[:2], "v": [0, 1]}))
        assert arch.present.rows() == 2  # mirrored without any read
        arch.append("m", 1, pd.DataFrame({"ts": ts[2:], "v": [2, 3]}))
        assert arch.present.rows() == 4
        for cid in arch.chunk_ids(["m"]):
            mem = arch.present_frame("m", cid).sort_values("v")["v"].tolist()
            with pg.connection() as conn, conn.cursor() as cur:
                cur.execute("SELECT v FROM m WHERE ts >= %s AND ts < %s ORDER BY v", arch.grid.bounds(cid))
                assert mem == [r[0] for r in cur.fetchall()]
        restarted = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
        try:  # after a restart, a chunk that already had rows is read on demand, not half-mirrored
            restarted.append("m", 2, pd.DataFrame({"ts": ts[3:] + timedelta(minutes=1), "v": [9]}))
            assert restarted.present.rows() == 0
            cid = restarted.grid.chunk_of(ts[3].to_pydatetime())
            assert sorted(restarted.present_frame("m", cid)["v"].tolist()) == [2, 3, 9]
        finally:
            restarted.close()
    finally:
        arch.close()
