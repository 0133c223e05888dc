"""Fixtures for the source tests. (Spark's Python workers run this virtualenv's
interpreter: :func:`moirae.runtime.spark.spark_session` sees to it.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.fixture
def dense_csv(tmp_path):
    """A dense in-order stream: one event every 10 ms for 20 000 events, as a CSV file."""
    n = 20_000
    path = tmp_path / "dense.csv"
    pd.DataFrame({"ts": np.arange(n, dtype="int64") * 10, "k": np.arange(n) % 7,
                  "v": np.round(np.sin(np.arange(n)), 6)}).to_csv(path, index=False)
    return path
