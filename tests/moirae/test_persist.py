"""State that survives a restart: similarity statistics, and the contributing-tuples view
that drives the contributing_only retention policy (A 3 facts → archive retention)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ananke.store import GraphStore
from archive import Archiver, ArchiveSettings, Contributing, Retention, RetentionPolicy, StreamSpec
from moirae.ingest.persist import (
    contributing_view,
    ensure_similarity_tables,
    forget_learned,
    load_similarity,
    save_similarity,
)
from similarity import ContextStatistics

pytestmark = pytest.mark.postgres


def _ids(learned, *probes):
    """Which of ``probes`` the loaded ids hold (they are kept as hashes, not listed)."""
    return {e for e in probes if e in learned}


def test_similarity_statistics_round_trip(pg):
    stats = ContextStatistics()
    for ctx in ([{"user": "a"}, {"proc": "x"}], [{"user": "b"}], [{"user": "a"}]):
        stats.learn_one(ctx)
    assert load_similarity(pg, "similar") is None
    save_similarity(pg, "similar", {"stats": stats.snapshot(), "learned": ["e1", "e2", "e3"]})
    back = load_similarity(pg, "similar")
    restored = ContextStatistics.restore(back["stats"])
    assert restored.events == 3 and restored.doc_freq("user=a") == 2
    assert _ids(back["learned"], "e1", "e2", "e3", "e4") == {"e1", "e2", "e3"} and len(back["learned"]) == 3


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


def _similarity_op(pg):
    from recall.similarity_recall import SimilarityRecall

    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1), recent_chunks=2))
    arch.register_stream(StreamSpec.build("ev_x", "ts", {"eid": "text", "host": "text"}))
    arch.register_stream(StreamSpec.build("cx_x_c", "ts", {"eid": "text", "user": "text"}))
    return arch, SimilarityRecall("sim", event="x", store=arch, event_stream="ev_x", context_streams=["cx_x_c"], k=3)


def test_learned_event_ids_are_saved_apart_a_round_s_new_ones_at_a_time(pg):
    """A save used to rewrite the ids of every event ever learned in the snapshot's JSON
    (24 MB at a million past events, every maintenance round); now each save adds the
    ids learned since the last one, in the same transaction as the statistics that count
    them, and a restart learns none of them twice. A snapshot of the earlier layout is
    read, and its ids are saved apart at the next save."""
    arch, op = _similarity_op(pg)
    arch2, op2 = _similarity_op(pg)
    ensure_similarity_tables(pg)  # as a deployment's load does before its first save
    try:
        for i in range(3):
            assert op.learn_event(f"e{i}", [{"user": f"u{i}"}])
        snap, new = op.state_delta()
        assert new == ["e0", "e1", "e2"] and "learned" not in snap
        save_similarity(pg, "sim", snap, new)
        op.learn_event("e1", [{"user": "again"}])                     # known: not counted, not saved again
        op.learn_event("e3", [{"user": "u3"}])
        snap, new = op.state_delta()
        assert new == ["e3"]
        op.keep_unsaved(new)                                          # as after a failed save
        snap, new = op.state_delta()
        assert new == ["e3"] and op.state_delta()[1] == []
        save_similarity(pg, "sim", snap, new)
        back = load_similarity(pg, "sim")
        assert _ids(back["learned"], "e0", "e1", "e2", "e3", "e4") == {"e0", "e1", "e2", "e3"} and back["learned_unsaved"] == set()
        op2.restore(back)
        assert op2.stats.events == 4
        assert op2.learn_event("e2", [{"user": "twice"}]) and op2.stats.events == 4
        assert op2.state_delta()[1] == []

        save_similarity(pg, "legacy", {**op.snapshot(), "learned": ["o1", "o2"]})  # an earlier release's save
        old = load_similarity(pg, "legacy")
        assert _ids(old["learned"], "o1", "o2", "e0") == old["learned_unsaved"] == {"o1", "o2"}
        op2.restore(old)
        snap, new = op2.state_delta()
        assert new == ["o1", "o2"]                                    # saved apart at the next save
        save_similarity(pg, "legacy", snap, new)
        again = load_similarity(pg, "legacy")
        assert again["learned_unsaved"] == set() and _ids(again["learned"], "o1", "o2", "e0") == {"o1", "o2"}

        from recall.similarity_recall import SimilarityRecall
        from similarity import NumericSpec

        other = SimilarityRecall("sim", event="x", store=arch, event_stream="ev_x", context_streams=["cx_x_c"], k=3,
                                 numeric={"user": NumericSpec()})  # another context declaration
        assert other.restore(load_similarity(pg, "sim")) is False    # its statistics are dropped...
        forget_learned(pg, "sim")                                     # ...and so are the ids they counted
        assert len(load_similarity(pg, "sim")["learned"]) == 0 and other.state_delta()[1] == []
    finally:
        arch.close()
        arch2.close()
