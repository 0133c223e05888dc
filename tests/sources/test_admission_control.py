"""Admission control of the engine's own sources: a query that fell behind takes its
backlog in bounded micro-batches, not one batch that grows with the backlog."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from moirae.sources.errors import InvalidReplayOption
from moirae.sources.spark_cluster import ClusterStreamReader, spec_from_options
from scheduler.clock import ManualClock


def test_paced_cluster_source_bounds_a_backlog_by_max_span():
    spec = spec_from_options({"stream": "metrics", "speedup": "60", "maxSpanSeconds": "600",
                              "start": "2025-10-01T00:00:00Z"})
    r = ClusterStreamReader(spec, None)
    r.clock = ManualClock(0.0)
    t0 = r.initialOffset()["t"]
    assert r.latestOffset({"t": t0}, ReadAllAvailable())["t"] == t0  # anchored: nothing due yet
    r.clock.advance(100)  # 100 wall s at 60x: 6000 scenario s due, a backlog of ten spans
    offsets = [t0]
    for _ in range(12):
        offsets.append(r.latestOffset({"t": offsets[-1]}, ReadAllAvailable())["t"])
    steps = np.diff(offsets)
    assert steps.max() == 600 * 10**9  # no batch over one span
    assert offsets[10] == t0 + 6000 * 10**9 and offsets[-1] == offsets[10]  # caught up, then due only
    r.clock.advance(1)
    assert r.latestOffset({"t": offsets[-1]}, ReadAllAvailable())["t"] == offsets[-1] + 60 * 10**9  # pace kept


def test_cluster_source_refuses_a_bad_span():
    with pytest.raises(InvalidReplayOption, match="maxSpanSeconds"):
        spec_from_options({"stream": "metrics", "maxSpanSeconds": "-5"})
    with pytest.raises(InvalidReplayOption, match="maxSpanSeconds"):
        spec_from_options({"stream": "metrics", "maxSpanSeconds": "lots"})


def test_replay_source_bounds_batches_by_default(tmp_path):
    from moirae.sources.spark_replay import DEFAULT_MAX_ROWS, ReplayStreamReader, _load

    path = tmp_path / "s.csv"
    pd.DataFrame({"ts": np.arange(50) * 1000, "v": np.arange(50)}).to_csv(path, index=False)
    opts = {"path": str(path), "ts_col": "ts", "unit": "ms", "speedup": "max"}
    replay = _load(opts)
    assert ReplayStreamReader(replay, None, opts).getDefaultReadLimit().max_rows == DEFAULT_MAX_ROWS
    assert isinstance(ReplayStreamReader(replay, None, {**opts, "maxRowsPerBatch": "0"}).getDefaultReadLimit(),
                      ReadAllAvailable)
    capped = ReplayStreamReader(replay, None, {**opts, "maxRowsPerBatch": "20"})
    limit = capped.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 20
    assert capped.latestOffset({"pos": 0}, limit) == {"pos": 20}
    assert capped.latestOffset({"pos": 40}, limit) == {"pos": 50}
    with pytest.raises(InvalidReplayOption, match="maxRowsPerBatch"):
        ReplayStreamReader(replay, None, {**opts, "maxRowsPerBatch": "some"})


def test_broker_sources_bound_batches_by_default():
    from moirae.sources import mqtt, nats

    assert nats.parse_options({"stream": "S"})["maxbatch"] == nats.DEFAULT_MAX_BATCH > 0
    assert nats.parse_options({"stream": "S", "maxBatch": "0"})["maxbatch"] == 0
    assert mqtt.parse_options({"topic": "t"})["maxbatch"] == mqtt.DEFAULT_MAX_BATCH > 0
    with pytest.raises(mqtt.MqttSourceError, match="maxbatch"):
        mqtt.parse_options({"topic": "t", "maxBatch": "-1"})

    class Held:  # the receiver's count of messages held, as MqttStreamReader asks it
        def latest(self, start):
            return start + 1_000

    r = mqtt.MqttStreamReader(mqtt.parse_options({"topic": "t", "maxBatch": "300"}), None)
    r._receiver = Held()
    limit = r.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 300
    assert r.latestOffset({"n": 10}, limit) == {"n": 310}
    assert r.latestOffset({"n": 10}, ReadAllAvailable()) == {"n": 1_010}
