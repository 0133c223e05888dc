"""An event-query whose stop fails does not keep the engine half running: the other
event-queries are still stopped, everything is released, and the failure is raised
(:meth:`moirae.deploy.manager.DeployManager.stop`, :meth:`moirae.engine.engine.Engine.close`)."""

from __future__ import annotations

import threading

import pytest

from moirae.deploy.manager import stop_order
from tests.engine_factory import make_engine
from tests.moirae.scenario_small import wait
from tests.moirae.test_shared_read_stop import KEYS, _metrics, _windows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_a_failed_stop_still_stops_the_other_event_queries_and_releases(spark, pg, tmp_path, monkeypatch):
    engine = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0})
    engine.source("metrics", _metrics(spark), ts="ts", lateness="1 second", indexes=[("sid",)])
    engine.event_query("one", _windows, inputs=["metrics"])
    engine.event_query("two", _windows, inputs=["metrics"])
    engine.start()
    flows = list(engine.deploy.flows.values())
    wait(lambda: all(f.resolver.stats["windows"] >= KEYS for f in flows), 120, "both queries resolving windows")
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
