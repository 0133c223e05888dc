"""ANK-N against ANK-1 over random streams (A 5.1-5.2): the same graph as sets.

A random stream of keyed readings, one file per micro-batch, runs through two sinks that
share source tuples: ``w`` (a sliding or tumbling count per key) and ``all`` (a tumbling
count over ``w``'s tuples). Flush rows far after the data move the watermark past every
real tuple's delay. ANK-1 (one feeder per sink) and ANK-N (both sinks in one query) run on
the same files; their (sink tuple, source tuple) pairs, vertices and expired labels must be
equal, ANK-N must emit nothing twice, and its stamps must keep R-E and R-L.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ananke.ank1 import Ank1
from ananke.ankn import AnkNSparkSink
from ananke.items import ListSink, graph_key
from ananke.query import ProvQuery
from ananke.spark_adapter import Ank1SparkSink
from tests.ananke.ank_helpers import at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "ts timestamp, k long, v long"
_RUNS = iter(range(10**6))  # hypothesis shares tmp_path across examples: a fresh directory each


@st.composite
def streams(draw):
    """(batches of rows, window size s, slide s, tumbling size of the chained window s)."""
    size = draw(st.sampled_from([20, 30, 60]))
    slide = draw(st.sampled_from([s for s in (10, 20, 30, 60) if s <= size and size % s == 0]))
    chained = draw(st.sampled_from([30, 60]))
    times = sorted(draw(st.lists(st.integers(0, 400), min_size=3, max_size=40)))
    rows = [dict(ts=at(8, 0) + timedelta(seconds=t), k=draw(st.integers(0, 2)), v=draw(st.integers(0, 3)))
            for t in times]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(rows) - 1), max_size=4))))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    end = rows[-1]["ts"]
    flush = [dict(ts=end + timedelta(hours=h), k=-1, v=0) for h in (1, 2)]
    return [*batches, flush[:1], flush[1:]], size, slide, chained


def _sinks(q: ProvQuery, stream, size: int, slide: int, chained: int):
    from pyspark.sql import functions as F

    w = (q.source(stream, "readings", "ts", lateness="0 seconds")
         .window(timedelta(seconds=size), timedelta(seconds=slide), keys=["k"], aggs=[F.count("v").alias("n")]))
    every = w.window(timedelta(seconds=chained), aggs=[F.sum("n").alias("total")])
    return [w.sink("w"), every.sink("all")]


def _pairs(items):
    return {(i.sink_id, i.source_id) for i in items if i.kind == "edge"}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams())
def test_ankn_delivers_ank1s_graph_over_random_streams(spark, file_stream, scenario):
    batches, size, slide, chained = scenario
    tag = next(_RUNS)
    q1 = ProvQuery()
    sinks1 = _sinks(q1, file_stream(batches, SCHEMA, name=f"a{tag}"), size, slide, chained)
    out1 = ListSink()
    logic = Ank1.from_query(q1).build(out1)
    feeders = [Ank1SparkSink(s, logic) for s in sinks1]
    for qq in [f.start(trigger={"availableNow": True}) for f in feeders]:
        qq.awaitTermination()
    for f in feeders:
        f.poll()

    qn = ProvQuery()
    sinksn = _sinks(qn, file_stream(batches, SCHEMA, name=f"n{tag}"), size, slide, chained)
    outn = ListSink()
    query = AnkNSparkSink(sinksn, outn).start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None

    keys1 = {graph_key(i) for i in out1.items}
    keysn = [graph_key(i) for i in outn.items]
    assert len(keysn) == len(set(keysn)), "ANK-N emitted an item twice"
    assert _pairs(outn.items) == _pairs(out1.items) and _pairs(out1.items)
    expired = {k for k in keys1 if k[0] == "label"}
    assert {k for k in keysn if k[0] == "label"} == expired
    assert set(keysn) == keys1
    # ANK-N's stamps: an edge at or after both its vertices, a label at or after every edge of its vertex
    vts = {(i.kind, i.id): i.ts for i in outn.items if i.kind in ("source", "sink")}
    last: dict[tuple, object] = {}
    for e in (i for i in outn.items if i.kind == "edge"):
        for v in (("source", e.source_id), ("sink", e.sink_id)):
            assert e.ts >= vts[v]
            last[v] = max(last.get(v, e.ts), e.ts)
    for lab in (i for i in outn.items if i.kind == "label"):
        v = (lab.vertex_kind, lab.vertex_id)
        assert lab.ts >= vts[v] and lab.ts >= last.get(v, lab.ts)
