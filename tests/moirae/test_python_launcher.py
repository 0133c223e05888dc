"""Spark's Python processes on a local master start through moirae.runtime.python_launcher:
this interpreter, with the installed pyspark's own zips off PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from moirae.runtime.python_launcher import launcher, python_for_workers, redundant_zips


def test_the_installed_pysparks_zips_are_the_ones_taken_off():
    zips = redundant_zips()
    names = sorted(os.path.basename(z) for z in zips)
    assert names[-1] == "pyspark.zip" and names[0].startswith("py4j-")
    assert all(os.path.isfile(z) for z in zips)


def test_the_launcher_filters_exactly_those_zips_and_runs_this_python(tmp_path):
    path = launcher(tmp_path)
    assert path is not None and launcher(tmp_path) == path  # written once, then reused
    zips = redundant_zips()
    other = str(tmp_path / "a dir with spaces")
    elsewhere = "/opt/spark/python/lib/pyspark.zip"  # another installation's zip stays
    env = {**os.environ, "PYTHONPATH": ":".join([zips[0], other, zips[-1], elsewhere])}
    out = subprocess.run([path, "-c", "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"{other}:{elsewhere}", sys.executable]


def test_a_cluster_master_keeps_this_interpreter():
    assert python_for_workers("spark://127.0.0.1:7077") == sys.executable
    assert python_for_workers("local[2]") == launcher()


@pytest.mark.spark
def test_a_python_data_source_is_planned_with_pyspark_from_site_packages(spark):
    if os.environ.get("PYSPARK_PYTHON") != launcher():
        pytest.skip("PYSPARK_PYTHON was set before the session: the user's interpreter runs Spark's workers")
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Where(InputPartition):
        def __init__(self, path: str, origin: str) -> None:
            self.path, self.origin = path, origin

    class Reader(DataSourceReader):
        def partitions(self):  # runs in the planner, a Python process Spark starts afresh
            import os

            import pyspark
            return [Where(os.environ.get("PYTHONPATH", ""), pyspark.__file__)]

        def read(self, partition):
            yield partition.path, partition.origin

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "moirae_test_where"

        def schema(self):
            return "path string, origin string"

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Source)
    path, origin = spark.read.format("moirae_test_where").load().first()
    assert not set(path.split(":")) & set(redundant_zips())
    assert ".zip" not in origin and os.path.isfile(origin)  # the installed package, with its cached bytecode
