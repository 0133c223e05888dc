"""Retention on the retraction machinery: under ``contributing_only`` an old, expired
chunk whose rows support only retracted alerts (or none) is dropped whole; a chunk with
a row feeding an alert that stands is only pruned (archive/tiers.py:apply_retention,
moirae/ingest/persist.py:contributing_view)."""

from __future__ import annotations

from datetime import timedelta

from ananke.items import Edge, SinkVertex, SourceVertex
from ananke.store import GraphStore
from archive import Contributing, Retention, RetentionPolicy
from moirae.ingest.persist import contributing_view
from moirae.retract.store import RetractionStore
from tests.archive.arch_helpers import T0, make_archiver, metrics_spec, rows


def test_chunks_only_retracted_alerts_used_are_dropped(pg):
    arch = make_archiver(pg)
    try:
        arch.register_stream(metrics_spec(retention=RetentionPolicy(Retention.CONTRIBUTING_ONLY)))
        arch.append("metrics", 0, rows(6 * 10, step=timedelta(minutes=10)))
        arch.demote(T0 + timedelta(hours=8))
        arch.age()  # chunks 0-5 old and behind the horizon
        frame = arch.read("metrics", T0, T0 + timedelta(hours=2), with_ids=True)
        hour = (frame["ts"] - T0) // timedelta(hours=1)
        graph = GraphStore(pg.connect, "ank_q").create()
        w = T0 + timedelta(hours=9)
        items = [SinkVertex(1, "q", T0, w, {"eid": "e1"}), SinkVertex(2, "q", T0, w, {"eid": "e2"})]
        for sid, h in zip(frame["_sid"], hour, strict=True):  # chunk 0 fed e1; one row of chunk 1 fed e2
            if h == 0 or sid == frame[hour == 1]["_sid"].iloc[0]:
                items += [SourceVertex(int(sid), T0, w), Edge(int(sid), 1 if h == 0 else 2, w)]
        graph(items)
        RetractionStore(pg).set_sinks(graph.e, {1: "e1"}, retracted=True)  # e1 was retracted
        moves = arch.apply_retention(Contributing(contributing_view(pg, [graph.e]), "source_id"))
        c0 = arch.grid.chunk_of(T0)
        actions = {m.chunk_id - c0: m.action for m in moves}
        assert actions == {0: "drop", 1: "prune", 2: "drop", 3: "drop", 4: "drop", 5: "drop"}
        left = {c.chunk_id - c0: c.rows for c in arch.chunks("metrics") if c.chunk_id - c0 < 6}
        assert left == {1: 1}  # only e2's row; dropped chunks leave the catalog's live list
        graph.close()
    finally:
        arch.close()
