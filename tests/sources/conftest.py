"""Fixtures for the source tests.

Spark's Python workers (which run the Python Data Sources) must use this virtualenv's
interpreter, not whatever ``python3`` is on PATH; the variable is read when the
SparkContext starts, so it is set here, at collection time, before the shared ``spark``
fixture creates the session.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture
def dense_csv(tmp_path):
    """A dense in-order stream: one event every 10 ms for 20 000 events, as a CSV file."""
    n = 20_000
    path = tmp_path / "dense.csv"
    pd.DataFrame({"ts": np.arange(n, dtype="int64") * 10, "k": np.arange(n) % 7,
                  "v": np.round(np.sin(np.arange(n)), 6)}).to_csv(path, index=False)
    return path
