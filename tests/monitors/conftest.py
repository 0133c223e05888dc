"""One running engine for the monitor tests that need one (package scope: its Spark
queries, its recall workers and its PostgreSQL schema are shared, the monitors differ)."""

from __future__ import annotations

import uuid

import pytest

from archive import Database


@pytest.fixture(scope="package")
def running_engine(pg_dsn, tmp_path_factory, spark):
    """A started engine with nothing deployed, on a fresh schema of one backend."""
    from tests.conftest import _backend_dsn
    from tests.engine_factory import ENV_UNSET, make_engine

    if pg_dsn != _backend_dsn("embedded"):
        pytest.skip("one backend is enough for the running-engine monitor tests")
    import os

    saved = {k: os.environ.pop(k) for k in ENV_UNSET if k in os.environ}
    db = Database(pg_dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    engine = make_engine(db, tmp_path_factory.mktemp("monitors") / "data", spark={"trigger": "300ms"},
                         archive={"chunk_span": "30m", "chunk_target_rows": 0, "recent_chunks": 20},
                         recall={"feedback_period": 100})
    try:
        engine.start()
        yield engine
    finally:
        engine.close()
        db.drop_schema()
        db.close()
        os.environ.update(saved)
