"""Fixtures of the Recall Manager tests: a real Archiver over the ``pg`` fixture's schema."""

from __future__ import annotations

import pytest

from tests.recall.manager.recall_mgr_helpers import make_archive


@pytest.fixture
def archive(pg):
    """Six one-hour chunks of ``metrics`` (hosts a and b, five rows each per chunk)."""
    arch = make_archive(pg)
    yield arch
    arch.close()
