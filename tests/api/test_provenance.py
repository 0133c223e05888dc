"""Provenance in the event detail without Spark: an Ananke graph written to PostgreSQL
(``GraphStore``, as ANK-1 writes it) for an event whose source tuples are archived. The
detail lists exactly the contributing tuples, read back from the archive, each with
whether it is expired (labelled). A read-only view finds the graph by its tables."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.items import Edge, Label, SinkVertex, SourceVertex
from ananke.store import GraphStore
from moirae.api import ReadOnlyEngine, create_app
from tests.api.api_helpers import T0, add_event
from tests.api.api_helpers import client as api_client

pytestmark = pytest.mark.postgres


def test_contributing_tuples_with_expiry(engine):
    add_event(engine, "ov:s1", 30, sid="s1", submit=False)
    add_event(engine, "ov:s2", 40, sid="s2", submit=False)
    rows = engine.archiver.read("metrics", T0 + timedelta(minutes=25), T0 + timedelta(minutes=30), with_ids=True)
    s1 = rows[rows["sid"] == "s1"].head(4)
    s2 = rows[rows["sid"] == "s2"].head(2)
    graph = GraphStore(engine.db.connect, prefix="ank_overload").create()
    now = T0 + timedelta(hours=5)
    items = [SinkVertex(101, "overload", T0 + timedelta(minutes=30), now, {"eid": "ov:s1", "sid": "s1"}),
             SinkVertex(102, "overload", T0 + timedelta(minutes=40), now, {"eid": "ov:s2", "sid": "s2"})]
    for sink, frame in ((101, s1), (102, s2)):
        for sid, ts in zip(frame["_sid"], frame["ts"], strict=True):
            items += [SourceVertex(int(sid), ts.to_pydatetime(), now), Edge(int(sid), sink, now)]
    expired = [int(x) for x in s1["_sid"][:2]]
    items += [Label(x, "source", now) for x in expired]
    graph(items)

    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        prov = api_client(create_app(ro)).get("/api/events/ov:s1").json()["provenance"]
    finally:
        ro.close()
    assert prov["available"] is True
    got = {s["source_id"]: s for s in prov["sources"]}
    assert set(got) == {int(x) for x in s1["_sid"]}  # not s2's tuples
    assert {x for x, s in got.items() if s["expired"]} == set(expired)
    assert (prov["expired"], prov["alive"]) == (2, 2)
    for s, (_, row) in zip(prov["sources"], s1.iterrows(), strict=True):  # ordered by event time
        assert s["stream"] == "metrics" and s["row"]["sid"] == "s1" and s["row"]["bw"] == pytest.approx(row["bw"])
        assert s["ts"] == row["ts"].isoformat()


def test_no_graph_means_no_provenance(engine):
    add_event(engine, "ev1", 30, submit=False)
    prov = api_client(create_app(engine)).get("/api/events/ev1").json()["provenance"]
    assert prov == {"available": False, "sources": []}
