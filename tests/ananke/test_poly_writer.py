"""A batch's polynomials stored beside ANK-1's work (ananke.poly_writer): on a thread of
their own, yet always before the batch's graph and before the batch returns; a failed
write holds the graph back, and a replay (the same process's, or a new one's after a
crash) stores polynomials and graph once each."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from ananke.ank1 import Ank1
from ananke.poly_store import PolyStore
from ananke.query import ProvQuery
from ananke.spark_adapter import Ank1SparkSink
from ananke.store import GraphStore


def _sink(spark):
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [(t0 + timedelta(seconds=7 * i), f"s{i % 3}", float(10 * i)) for i in range(60)]
    q = ProvQuery(polynomials=True)
    m = q.source(spark.createDataFrame(rows, "ts timestamp, sid string, bw double"), "m", "ts")
    sink = m.window("1 minute", keys=["sid"], aggs=[F.avg("bw").alias("a")], ts_out="ts").filter(
        F.col("a") > 100).sink("w")
    return q, sink


def test_polynomials_are_stored_off_the_batch_thread_before_the_graph(spark, pg):
    q, sink = _sink(spark)
    graph = GraphStore(pg.connect, prefix="ank_pw1", borrow=pg.connection).create()
    store = PolyStore(pg.connect, prefix="pw1_poly", borrow=pg.connection).create()
    store.put_plan(sink.poly)
    seen = []

    def put(rows):
        time.sleep(0.3)  # a slow write: the graph must still wait for it
        seen.append((threading.current_thread() is threading.main_thread(), graph.counts()["sink"]))
        store.put("w", rows)

    adapter = Ank1SparkSink(sink, Ank1.from_query(q).build(emit=graph), polys=put)
    adapter(sink.with_ids(), 0)
    assert seen == [(False, 0)]  # on its own thread, with no sink vertex written yet
    n = store.count("w")
    assert n > 0 and graph.counts()["sink"] == n and adapter.poly_writer.owed == 0
    assert adapter.seconds["poly"] >= 0.3 and "poly_wait" in adapter.seconds


def test_a_failed_polynomial_write_holds_the_graph_back_and_replays_store_each_once(spark, pg):
    q, sink = _sink(spark)
    graph = GraphStore(pg.connect, prefix="ank_pw2", borrow=pg.connection).create()
    store = PolyStore(pg.connect, prefix="pw2_poly", borrow=pg.connection).create()
    store.put_plan(sink.poly)
    failures = [2]  # the job on its thread, then its retry before the graph

    def put(rows):
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("the database went away")
        store.put("w", rows)

    batch = sink.with_ids()
    adapter = Ank1SparkSink(sink, Ank1.from_query(q).build(emit=graph), polys=put)
    with pytest.raises(ConnectionError):
        adapter(batch, 0)  # the batch fails: Spark does not commit it
    assert store.count("w") == 0 and graph.counts()["sink"] == 0 and adapter.poly_writer.owed == 1
    adapter(batch, 0)  # the same process's replay: the owed polynomials, then the graph ANK-1 kept
    n = store.count("w")
    assert n > 0 and graph.counts()["sink"] == n and adapter.poly_writer.owed == 0
    # a crash before the commit: a new process replays the batch from the checkpoint
    again = Ank1SparkSink(sink, Ank1.from_query(q).build(emit=graph), polys=lambda rows: store.put("w", rows))
    again(batch, 0)
    assert store.count("w") == n and graph.counts()["sink"] == n
