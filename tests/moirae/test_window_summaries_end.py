"""A window resolver's background BRIN summaries (archive.brin_summary) end with their
owner, on a real archive: an event-query's stop ends them even when stopping its
streaming query fails, and a resolver dropped without being stopped (one a caller built
and read through) leaves no thread behind summarizing a schema that may be gone."""

from __future__ import annotations

import gc
import threading
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from ananke.digest import Digest, DigestSpec, xor_ids
from ananke.ids import micros
from archive import StreamSpec
from moirae.ingest.window_provenance import ArchiveResolver
from tests.engine_factory import make_engine

pytestmark = pytest.mark.postgres

T0 = datetime(2024, 5, 1, tzinfo=UTC)
SPEC = DigestSpec("metrics", "ts", ("sid",))


def _summarizing() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("moirae-brin-") and t.is_alive()]


@pytest.fixture
def engine(pg, tmp_path, monkeypatch):
    e = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "100ms"},
                    archive={"chunk_span": "1h", "chunk_target_rows": 0})
    yield e
    e.close()


def test_a_resolver_dropped_unstopped_leaves_no_summarizing_thread(engine):
    engine.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "bigint", "bw": "double"}))
    engine.archiver.append("metrics", 0, pd.DataFrame({"ts": [T0 + timedelta(seconds=s) for s in range(4)],
                                                       "sid": [0] * 4, "bw": [1.0] * 4}))
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid FROM metrics")
        ids = [r[0] for r in cur.fetchall()]
    before = set(_summarizing())
    r = ArchiveResolver(engine.archiver, SPEC, engine.sources.waits, engine.settings.spark.trigger.total_seconds())
    got = r(SPEC, [Digest((0,), micros(T0), micros(T0 + timedelta(seconds=10)), len(ids), xor_ids(ids))])
    assert sorted(i for i, _ in got[0]) == sorted(ids)
    thread = r.summaries._thread  # the read started the background passes
    assert thread is not None and thread.is_alive()
    del r, got
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert set(_summarizing()) <= before


@pytest.mark.spark
def test_an_event_query_whose_stop_fails_still_ends_its_summaries(spark, engine, tmp_path, monkeypatch):
    import moirae.ingest.live as live

    folder = tmp_path / "in"
    folder.mkdir()
    df = spark.readStream.schema(sc.SCHEMA).csv(str(folder))
    engine.source("metrics", df, ts="ts", lateness="30 seconds", indexes=[("sid",)])
    engine.event_query("overload", sc.overload, inputs=["metrics"])
    flow = engine.deploy.flows["overload"]
    assert flow.resolver is not None  # a window over one source: its digests are resolved from the archive
    flow.resolver.start()  # as the flow's start does, after its streaming query's
    thread = flow.resolver.summaries._thread
    assert thread is not None and thread.is_alive()

    def lost(query, grace_s):
        raise RuntimeError("the streaming query's JVM side is gone")

    monkeypatch.setattr(live, "stop_between_batches", lost)
    flow.streaming = object()  # a started query (stop_between_batches is the stand-in above)
    try:
        with pytest.raises(RuntimeError, match="JVM side is gone"):
            flow.stop(grace=0)
    finally:
        flow.streaming = None  # the engine's close stops the flow again
    assert flow.resolver.summaries._thread is None and not thread.is_alive()
