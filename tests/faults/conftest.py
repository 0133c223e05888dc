"""Fixtures of the fault-injection suite; see ``fault_helpers``."""

from __future__ import annotations

import os
import uuid

import pytest

from archive.pg import Database
from tests.faults.fault_helpers import TEST_DATA_DIR, PrivateServer


@pytest.fixture(scope="session")
def private_pg():
    # beside the shared test server, not under pytest's tmp dir: the server runs as another
    # user when the tests run as root, and pytest keeps its tmp root private to root
    # one per pytest-xdist worker: a test stops and starts its server, and counts its sessions
    server = PrivateServer(TEST_DATA_DIR / f"faults-pg-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    yield server
    server.close()


@pytest.fixture
def private_db(private_pg):
    private_pg.ensure_running()
    db = Database(private_pg.dsn, schema=f"f_{uuid.uuid4().hex[:12]}", retry_seconds=60)
    yield db
    try:
        db.drop_schema()
    except Exception:
        pass
    db.close()
