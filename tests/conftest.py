"""Shared fixtures: one Spark session per run, PostgreSQL both ways, and the engine factory.

``pg`` is parametrized over the embedded server (``pgserver``, always) and the external
server at 127.0.0.1:5432 (or ``MOIRAE_TEST_EXTERNAL_DSN``) when one answers, so every
database test runs against both. Each test gets its own schema, dropped afterwards.
The run policy (markers derived from these fixtures, the quick guard, skipped areas,
Hypothesis examples under CI) is the plugin :mod:`tests.areas`.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg2
import pytest
from hypothesis import HealthCheck, settings

from archive.pg import Database, embedded_dsn

pytest.register_assert_rewrite("tests.areas")  # imported here before pytest loads it as a plugin
pytest_plugins = ("tests.areas",)  # derived markers, the quick guard, the skip policy
from tests.areas import CI  # noqa: E402

# CI runs on a loaded 2-core machine: no per-example deadline or too-slow check there, and a
# failure prints the blob that replays it (tests/areas.py raises the examples of properties
# over Spark and PostgreSQL to 20 there)
settings.register_profile("ci", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
if CI:
    settings.load_profile("ci")

# The suite's JVMs (each worker's session, and the engines of the child processes tests
# start) live for seconds to minutes over small data: compiled by C1 only, they start on
# about 40 % less CPU (moirae.runtime.spark.JVM_OPTIONS_ENV). A developer's own setting wins.
os.environ.setdefault("MOIRAE_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")

EXTERNAL_DEFAULT = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
TEST_DATA_DIR = Path(os.environ.get("MOIRAE_TEST_DATA_DIR", Path(__file__).resolve().parent.parent / ".moirae-test"))


def _external_dsn() -> str | None:
    dsn = os.environ.get("MOIRAE_TEST_EXTERNAL_DSN", EXTERNAL_DEFAULT)
    if os.environ.get("MOIRAE_TEST_EXTERNAL") == "0":
        return None
    try:
        psycopg2.connect(dsn).close()
    except psycopg2.OperationalError:
        if os.environ.get("MOIRAE_TEST_EXTERNAL") == "1":
            raise
        return None
    return dsn


_BACKENDS: dict[str, str | None] = {}


def _backend_dsn(kind: str) -> str | None:
    if kind not in _BACKENDS:
        _BACKENDS[kind] = embedded_dsn(TEST_DATA_DIR) if kind == "embedded" else _external_dsn()
    return _BACKENDS[kind]


@pytest.fixture(scope="session", params=["embedded", "external"])
def pg_dsn(request) -> str:
    """A DSN for each PostgreSQL backend; the external one is skipped when none answers."""
    dsn = _backend_dsn(request.param)
    if dsn is None:
        pytest.skip("no external PostgreSQL at 127.0.0.1:5432 (set MOIRAE_TEST_EXTERNAL=1 to require it)")
    return dsn


@pytest.fixture
def pg(pg_dsn) -> Database:
    """A Database confined to a fresh schema, dropped after the test."""
    db = Database(pg_dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    yield db
    db.drop_schema()
    db.close()


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run."""
    from moirae.runtime.spark import spark_session

    session = spark_session(master="local[2]", app_name="moirae-tests")
    yield session
    session.stop()


@pytest.fixture
def engine_factory(pg, tmp_path, monkeypatch):
    """``engine_factory(data="data", **sections)`` -> a new Engine on this test's ``pg``
    schema with its data under ``tmp_path / data`` (:func:`tests.engine_factory.make_engine`);
    the caller closes it."""
    from tests.engine_factory import make_engine

    def make(data: str = "data", **sections):
        return make_engine(pg, tmp_path / data, monkeypatch, **sections)

    return make


@pytest.fixture(autouse=True)
def _no_similarity_listener_outlives_its_test():
    """An operator a test builds and never closes (over a stand-in store, say) stays
    subscribed to the process-wide similarity index events (:mod:`archive.simindex`),
    and the next test's engine would call it: each test ends with the lists it began with."""
    from archive import simindex

    with simindex._lock:
        before = list(simindex._listeners), list(simindex._ready)
    yield
    with simindex._lock:
        simindex._listeners[:], simindex._ready[:] = before
