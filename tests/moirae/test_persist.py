"""State that survives a restart: similarity statistics, and the contributing-tuples view
that drives the contributing_only retention policy (A 3 facts → archive retention)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ananke.store import GraphStore
from archive import Archiver, ArchiveSettings, Contributing, Retention, RetentionPolicy, StreamSpec
from moirae.persist import contributing_view, load_similarity, save_similarity
from similarity import ContextStatistics

pytestmark = pytest.mark.postgres


def test_similarity_statistics_round_trip(pg):
    stats = ContextStatistics()
    for ctx in ([{"user": "a"}, {"proc": "x"}], [{"user": "b"}], [{"user": "a"}]):
        stats.learn_one(ctx)
    assert load_similarity(pg, "similar") is None
    save_similarity(pg, "similar", {"stats": stats.snapshot(), "learned": ["e1", "e2", "e3"]})
    back = load_similarity(pg, "similar")
    restored = ContextStatistics.restore(back["stats"])
    assert restored.events == 3 and restored.doc_freq("user=a") == 2
    assert back["learned"] == ["e1", "e2", "e3"]


def test_contributing_view_keeps_only_tuples_with_edges(pg):
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1), recent_chunks=0))
    try:
        arch.register_stream(StreamSpec.build("m", "ts", {"v": "bigint"},
                                              retention=RetentionPolicy(Retention.CONTRIBUTING_ONLY)))
        ts = pd.date_range("2024-01-01", periods=6, freq="10min", tz="UTC")
        arch.append("m", 0, pd.DataFrame({"ts": ts, "v": range(6)}))
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT _sid FROM m WHERE v IN (1, 4)")
            keep = [r[0] for r in cur.fetchall()]
        graph = GraphStore(pg.connect, prefix="ank_q").create()
        with pg.connection() as conn, conn.cursor() as cur:
            for sid in keep:
                cur.execute(f"INSERT INTO {graph.e} (source_id, sink_id, ts) VALUES (%s, 1, now())", (sid,))
        view = contributing_view(pg, [graph.e])
        arch.demote(datetime(2024, 1, 2, tzinfo=UTC))
        arch.age()  # R = 0: the chunk is old
        arch.apply_retention(Contributing(view, "source_id"))
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT v FROM m ORDER BY v")
            assert [r[0] for r in cur.fetchall()] == [1, 4]
    finally:
        arch.close()
    assert contributing_view(pg, []) is None
