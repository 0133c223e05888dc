"""Pacing by ingestion time and the Spark sources' option parsing (no Spark needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moirae.sources.errors import InvalidFraction, InvalidReplayOption, ScenarioConfigError, UnparseableRows
from moirae.sources.pacing import Pacer
from moirae.sources.spark_cluster import spec_from_options
from moirae.sources.spark_replay import _load, config_from_options
from scheduler.clock import ManualClock

S = 1_000_000_000


def test_pacer_follows_ingestion_time_and_speedup():
    clock = ManualClock(0.0)
    ingest = np.array([0, 0, 1, 2, 4, 8], dtype="int64") * S
    p = Pacer(ingest, speedup=2.0, clock=clock)
    assert p.due(0) == 2            # both rows at t=0 are due at once
    clock.advance(0.5)              # 1 s of stream time at 2x
    assert p.due(2) == 3
    clock.advance(1.5)              # 4 s of stream time
    assert p.due(3) == 5
    assert p.due(3, max_rows=1) == 4
    clock.advance(100)
    assert p.due(5) == 6 and p.due(6) == 6


def test_pacer_reanchors_on_restart_at_checkpointed_position():
    clock = ManualClock(50.0)
    ingest = np.arange(100, dtype="int64") * S
    p = Pacer(ingest, speedup=1.0, clock=clock)
    assert p.due(40) == 41          # a restart at row 40 starts from row 40's ingestion time
    clock.advance(3)
    assert p.due(41) == 44
    assert Pacer(ingest, speedup="max", clock=clock).due(10) == 100


def test_replay_options_parse_and_fail_clearly(tmp_path):
    path, cfg = config_from_options({"path": "x.csv", "ts_col": "t", "unit": "ms", "out_of_order": "12.5",
                                     "MAX_DELAY_MS": "300", "seed": "4", "speedup": "max"})
    assert (path, cfg.out_of_order, cfg.max_delay_ms, cfg.seed, cfg.speedup) == ("x.csv", 12.5, 300.0, 4, "max")
    with pytest.raises(InvalidReplayOption, match="ts_col"):
        config_from_options({"path": "x.csv"})
    with pytest.raises(InvalidReplayOption, match="colour"):
        config_from_options({"path": "x.csv", "ts_col": "t", "colour": "red"})
    with pytest.raises(InvalidReplayOption, match="'seed'.*'abc'"):
        config_from_options({"path": "x.csv", "ts_col": "t", "seed": "abc"})
    with pytest.raises(InvalidFraction, match="101"):
        config_from_options({"path": "x.csv", "ts_col": "t", "out_of_order": "101"})


def test_replay_source_dead_letters_or_refuses_unparseable_rows(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("t,v\n0,a\nbad,b\n20,c\n")
    with pytest.raises(UnparseableRows, match="1 row.*deadLetterPath"):
        _load({"path": str(src), "ts_col": "t", "unit": "ms"})
    dead = tmp_path / "dead.csv"
    replay = _load({"path": str(src), "ts_col": "t", "unit": "ms", "deadLetterPath": str(dead)})
    assert replay.rows["v"].tolist() == ["a", "c"]
    assert pd.read_csv(dead)["reason"].tolist() == ["cannot parse 'bad' as a number of ms"]


def test_cluster_source_options(tmp_path):
    spec = spec_from_options({"stream": "users", "start": "2025-09-30T00:00:00Z", "out_of_order": "10",
                              "max_delay_ms": "500", "speedup": "60"})
    assert spec.stream == "users" and spec.speedup == 60.0 and spec.config.live.out_of_order == 10.0
    with pytest.raises(InvalidReplayOption, match="stream"):
        spec_from_options({"stream": "disks"})
    with pytest.raises(ScenarioConfigError, match="live.out_of_order"):
        spec_from_options({"stream": "metrics", "out_of_order": "150"})
    with pytest.raises(InvalidReplayOption, match="time zone"):
        spec_from_options({"stream": "metrics", "start": "2025-09-30T00:00:00"})


def test_cluster_reader_paces_scenario_time_and_bounds_available_now():
    from moirae.sources.spark_cluster import ClusterStreamReader

    paced = ClusterStreamReader(spec_from_options({"stream": "metrics", "speedup": "60",
                                                   "start": "2025-09-30T00:00:00Z"}), None)
    paced.clock = ManualClock(0.0)
    first = paced.initialOffset()
    assert paced.latestOffset(first, None) == first
    paced.clock.advance(10)  # 10 wall seconds at 60x: ten scenario minutes
    assert paced.latestOffset(first, None)["t"] - first["t"] == 600 * S
    bounded = ClusterStreamReader(spec_from_options({"stream": "procs", "speedup": "max", "maxSpanSeconds": "3600",
                                                     "start": "2025-09-30T00:00:00Z",
                                                     "until": "2025-09-30T02:30:00Z"}), None)
    bounded.prepareForTriggerAvailableNow()
    offs = [bounded.initialOffset()]
    for _ in range(4):
        offs.append(bounded.latestOffset(offs[-1], None))
    assert [(o["t"] - offs[0]["t"]) / 3600 / S for o in offs] == [0, 1, 2, 2.5, 2.5]
    unbounded = ClusterStreamReader(spec_from_options({"stream": "procs", "speedup": "max"}), None)
    with pytest.raises(InvalidReplayOption, match="until"):
        unbounded.prepareForTriggerAvailableNow()
