"""A Similarity Recall row's times are written as ``pd.Timestamp(ns, tz="UTC").isoformat()``
writes them, through the cheaper path where the time has no nanoseconds."""

from __future__ import annotations

import numpy as np
import pandas as pd

from recall.similarity_recall import _iso


def test_iso_times_equal_pandas_text():
    rng = np.random.default_rng(5)
    times = [0, -1_000, 5, 1_767_225_600_123_456_000, 1_767_225_600_000_000_000, 1_767_225_600_000_000_001,
             *rng.integers(-2**62, 2**62, 200).tolist(), *(rng.integers(0, 2**61, 200) // 1000 * 1000).tolist()]
    for ns in times:
        assert _iso(ns) == pd.Timestamp(ns, tz="UTC").isoformat(), ns
    assert _iso(np.int64(1_767_225_600_123_456_000)) == "2026-01-01T00:00:00.123456+00:00"
