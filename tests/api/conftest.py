"""Fixtures for the API tests: a real engine (no Spark queries started) over a real
PostgreSQL, with an archived stream, a Recall operator on the real Recall Manager, and
events in the real event log."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archive.streams import StreamSpec
from recall.operator import Recall
from tests.api.api_helpers import HOURS, T0


@pytest.fixture
def engine(engine_factory):
    """An engine whose archive holds ``metrics`` (3 h, 3 servers) and whose Recall
    operator ``hist`` suspends after every chunk (feedback_period=1), so tasks stay open
    until steered."""
    e = engine_factory(archive={"chunk_span": "10m", "chunk_target_rows": 0},
                       recall={"max_concurrent": 2, "tickets_per_result": 0})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"},
                                                indexes=[("sid",)]))
    n = HOURS * 360
    rng = np.random.default_rng(7)
    e.archiver.append("metrics", -1, pd.DataFrame({
        "ts": pd.date_range(T0, periods=n, freq="10s"), "sid": [f"s{i % 3}" for i in range(n)],
        "bw": rng.normal(50, 10, n)}), bulk=True)
    e.deploy.manager.register(Recall(
        "hist", "SELECT h.sid, avg(h.bw) AS mean_bw, count(*) AS n FROM metrics h WHERE h.sid = :sid GROUP BY h.sid",
        store=e.archiver, feedback_period=1, feedback_timeout=600))
    yield e
    e.close()

