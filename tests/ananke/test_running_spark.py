"""The running example (A 1-2, fig. 3) through real Spark streaming, ANK-1 and ANK-N.

Input, one file per micro-batch, watermark delay 0:

    batch 0: 8:00 car1 in R 100 km/h, car2 outside 120;  8:05 car1 in R 100, car2 outside 120
    batch 1: 8:10 car1 in R 100,      car2 outside 90;   8:15 car1 outside 100, car2 outside 100
    batch 2: 8:40 car3 in R 50        (moves the watermark to 8:15)
    batch 3: 8:50 car3 in R 50        (moves it to 8:40)

(car3 is inside R because Spark pushes Q1's region filter below the watermark, so only
reports inside R advance K1's watermark.)

Worked out by hand:

- K1 (count of reports in R per 15-min window > 2): window [8:00, 8:15) of car1 -> one
  alert with provenance {car1@8:00, car1@8:05, car1@8:10}.
- K2 (15-min mean speed, 5-min advance, > 110): car2's windows [7:50, 8:05) (mean 120,
  provenance {car2@8:00}) and [7:55, 8:10) (mean 120, provenance {car2@8:00, car2@8:05}).
  [8:00, 8:15) has mean 110, not above; car1 and car3 are never above 110.
- Graph: 5 source vertices, 3 sink vertices, 6 edges; at the final watermark 8:40 the
  horizon is 8:25, so every source and every sink is labelled expired: 8 labels.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.ank1 import Ank1
from ananke.ankn import AnkNSparkSink
from ananke.examples import running
from ananke.ids import source_id_col
from ananke.items import ListSink, graph_key
from ananke.query import ProvQuery
from ananke.spark_adapter import Ank1SparkSink
from tests.ananke.ank_helpers import at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

R, OUT = (5.0, 5.0), (50.0, 50.0)
BATCHES = [
    [dict(ts=at(8, 0), car=1, x=R[0], y=R[1], speed=100.0), dict(ts=at(8, 0), car=2, x=OUT[0], y=OUT[1], speed=120.0),
     dict(ts=at(8, 5), car=1, x=R[0], y=R[1], speed=100.0), dict(ts=at(8, 5), car=2, x=OUT[0], y=OUT[1], speed=120.0)],
    [dict(ts=at(8, 10), car=1, x=R[0], y=R[1], speed=100.0), dict(ts=at(8, 10), car=2, x=OUT[0], y=OUT[1], speed=90.0),
     dict(ts=at(8, 15), car=1, x=OUT[0], y=OUT[1], speed=100.0), dict(ts=at(8, 15), car=2, x=OUT[0], y=OUT[1], speed=100.0)],
    [dict(ts=at(8, 40), car=3, x=R[0], y=R[1], speed=50.0)],
    [dict(ts=at(8, 50), car=3, x=R[0], y=R[1], speed=50.0)],
]
DELTA = timedelta(microseconds=1)


def _source_ids(spark) -> dict[tuple[int, object], int]:
    rows = [r for b in BATCHES for r in b]
    df = spark.createDataFrame([(r["ts"], r["car"], r["x"], r["y"], r["speed"]) for r in rows], running.SCHEMA)
    got = df.select("car", "ts", source_id_col("cars", "ts", ["car", "x", "y", "speed"]).alias("id")).collect()
    return {(r["car"], r["ts"].replace(tzinfo=None)): r["id"] for r in got}


def _expected(spark):
    ids = _source_ids(spark)

    def sid(car, t):
        return ids[(car, t.replace(tzinfo=None))]

    k1 = {(at(8, 15) - DELTA, frozenset({sid(1, at(8, 0)), sid(1, at(8, 5)), sid(1, at(8, 10))}))}
    k2 = {(at(8, 5) - DELTA, frozenset({sid(2, at(8, 0))})),
          (at(8, 10) - DELTA, frozenset({sid(2, at(8, 0)), sid(2, at(8, 5))}))}
    sources = {(sid(c, t), t) for c, t in [(1, at(8, 0)), (1, at(8, 5)), (1, at(8, 10)), (2, at(8, 0)), (2, at(8, 5))]}
    return k1, k2, sources


def _summary(items):
    sinks = {i.id: i for i in items if i.kind == "sink"}
    prov: dict[int, set[int]] = {}
    for e in (i for i in items if i.kind == "edge"):
        prov.setdefault(e.sink_id, set()).add(e.source_id)
    by_sink = {name: {(v.tuple_ts, frozenset(prov.get(v.id, ()))) for v in sinks.values() if v.sink == name}
               for name in ("K1", "K2")}
    sources = {(i.id, i.tuple_ts) for i in items if i.kind == "source"}
    labels = {(i.vertex_kind, i.vertex_id) for i in items if i.kind == "label"}
    return by_sink, sources, labels, sinks


def _run_all(runners):
    queries = [r.start(trigger={"availableNow": True}) for r in runners]
    for q in queries:
        q.awaitTermination()
    return queries


def test_running_example_ank1_and_ankn_on_spark(spark, file_stream):
    """ANK-1 delivers exactly the hand-worked graph; ANK-N delivers the same sets."""
    q = ProvQuery()
    k1, k2 = running.build(q, file_stream(BATCHES, running.SCHEMA, name="ank1"))
    assert q.u_k("K1") == q.u_k("K2") == q.U == timedelta(minutes=15)
    out = ListSink()
    horizons = []
    logic = Ank1.from_query(q).build(out, on_horizon=horizons.append)
    feeders = [Ank1SparkSink(k, logic) for k in (k1, k2)]
    queries = _run_all(feeders)
    wms = [f.poll() for f in feeders]
    assert min(wms) >= at(8, 40)
    by_sink, sources, labels, sinks = _summary(out.items)
    e1, e2, esources = _expected(spark)
    assert by_sink["K1"] == e1
    assert by_sink["K2"] == e2
    assert sources == esources
    assert labels == {("source", s) for s, _ in esources} | {("sink", s) for s in sinks}
    keys = [graph_key(i) for i in out.items]
    assert len(keys) == len(set(keys)) == 3 + 5 + 6 + 8
    assert logic.horizon() == min(wms) - timedelta(minutes=15)
    assert horizons[-1] == logic.horizon() and horizons == sorted(horizons)
    assert logic.state_size() == 0
    assert all(qq.exception() is None for qq in queries)

    qn = ProvQuery()
    n1, n2 = running.build(qn, file_stream(BATCHES, running.SCHEMA, name="ankn"))
    outn = ListSink()
    _run_all([AnkNSparkSink([n1, n2], outn)])
    keys_n = [graph_key(i) for i in outn.items]
    assert len(keys_n) == len(set(keys_n)), "ANK-N emitted duplicates"
    assert set(keys_n) == set(keys)
    # ANK-N timestamps: edges and labels at or after their vertices (R-E, R-L)
    ts = {("source", i.id) if i.kind == "source" else ("sink", i.id): i.ts for i in outn.items
          if i.kind in ("source", "sink")}
    for e in (i for i in outn.items if i.kind == "edge"):
        assert e.ts >= ts[("source", e.source_id)] and e.ts >= ts[("sink", e.sink_id)]
    last_edge: dict[tuple, object] = {}
    for e in (i for i in outn.items if i.kind == "edge"):
        for v in (("source", e.source_id), ("sink", e.sink_id)):
            last_edge[v] = max(last_edge.get(v, e.ts), e.ts)
    for lab in (i for i in outn.items if i.kind == "label"):
        v = (lab.vertex_kind, lab.vertex_id)
        assert lab.ts >= ts[v] and lab.ts >= last_edge.get(v, lab.ts)


def test_a_batch_replayed_in_the_same_process_still_commits_its_state(spark, file_stream, tmp_path):
    """A stateful query restarted from its checkpoint in the same process replays its last
    uncommitted batch; ANK-1 has seen it and delivers nothing again, but the batch must
    still run to its end: Spark fails a query whose state stores did not all commit
    (STATE_STORE_COMMIT_VALIDATION_FAILED), which a full data directory's restart hit."""
    q = ProvQuery()
    k1, _k2 = running.build(q, file_stream(BATCHES, running.SCHEMA, name="replay"))
    out = ListSink()
    feeder = Ank1SparkSink(k1, Ank1.from_query(q).build(out))
    feeder.last_batch = 10**6  # every batch of this run counts as already seen
    query = feeder.start(str(tmp_path / "cp"), {"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    assert out.items == [] and feeder.rows == 0  # nothing delivered twice
