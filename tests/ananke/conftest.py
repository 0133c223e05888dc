"""Fixtures for the Ananke tests."""

from __future__ import annotations

import pytest

from tests.ananke.ank_helpers import write_batches


@pytest.fixture
def file_stream(spark, tmp_path):
    """``make(batches, schema)`` -> a streaming DataFrame replaying ``batches`` one per trigger."""

    def make(batches, schema, name="in"):
        d = tmp_path / name
        write_batches(d, batches)
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(d))

    return make
