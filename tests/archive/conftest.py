"""Fixtures for the Archiver tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from archive import Archiver
from tests.archive.arch_helpers import make_archiver, metrics_spec


@pytest.fixture
def archiver(pg) -> Iterator[Archiver]:
    """An Archiver with 1-hour chunks, R = 2 and the ``metrics`` stream registered."""
    arch = make_archiver(pg)
    arch.register_stream(metrics_spec())
    yield arch
    arch.close()
