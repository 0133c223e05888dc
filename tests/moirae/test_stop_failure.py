"""Stopping the engine's event-queries (:meth:`moirae.deploy.manager.DeployManager.stop`):
the queries of a wave (:func:`moirae.deploy.manager.stop_waves`) stop together, and one
whose stop fails does not keep the engine half running: the other event-queries are
still stopped, everything is released, and the failure is raised
(:meth:`moirae.engine.engine.Engine.close`)."""

from __future__ import annotations

import threading

import pytest

from moirae.deploy.manager import stop_order, stop_waves
from tests.engine_factory import make_engine
from tests.moirae.scenario_small import wait
from tests.moirae.test_shared_read_stop import KEYS, _metrics, _windows

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]


def _started(spark, pg, tmp_path, monkeypatch, names):
    engine = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0})
    engine.source("metrics", _metrics(spark), ts="ts", lateness="1 second", indexes=[("sid",)])
    for name in names:
        engine.event_query(name, _windows, inputs=["metrics"])
    engine.start()
    flows = list(engine.deploy.flows.values())
    wait(lambda: all(f.resolver.stats["windows"] >= KEYS for f in flows), 120, "the queries resolving windows")
    return engine, flows


def test_the_reads_of_a_wave_stop_together(spark, pg, tmp_path, monkeypatch):
    engine, flows = _started(spark, pg, tmp_path, monkeypatch, ["one", "two", "three"])
    first, last = stop_waves(flows)  # the two plain reads, then the one whose read archives metrics
    assert len(first) == 2 and len(last) == 1
    together = threading.Barrier(len(first), timeout=60)  # one by one, the first would wait alone and break it
    for f in first:
        f.stop = (lambda stop: lambda grace=None: (together.wait(), stop(grace)))(f.stop)
    try:
        engine.stop()
        assert all(f.stopped and f.streaming is None for f in flows)
        assert not together.broken
    finally:
        engine.close()


def test_a_failed_stop_still_stops_the_other_event_queries_and_releases(spark, pg, tmp_path, monkeypatch):
    engine, flows = _started(spark, pg, tmp_path, monkeypatch, ["one", "two"])
    first, *rest = stop_order(flows)  # the one stopped first fails: the rest must still stop
    stop = first.stop

    def failing(grace=None):
        stop(grace)
        raise RuntimeError(f"stopping {first.query.name} failed")

    first.stop = failing
    with pytest.raises(RuntimeError, match="failed"):
        engine.close()
    for f in rest:
        assert f.stopped and f.streaming is None, f.query.name
    names = {f"event_{f.query.name}" for f in flows}
    assert not [q.name for q in spark.streams.active if q.name in names]
    assert not [t.name for t in threading.enumerate() if t.name.startswith("moirae-brin-") and t.is_alive()]
    assert not [t for t in engine.deploy.manager.threads() if t.is_alive()]  # released: recall's workers ended
