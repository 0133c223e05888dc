"""The PostgreSQL side of the archive never imports pyspark: only the Spark side
(archive.spark_sink, archive.exec_udf, archive.shared) needs it, and only inside the
functions Spark calls."""

from __future__ import annotations

import subprocess
import sys

PG_SIDE = ("archive", "archive.archiver", "archive.pg", "archive.chunks", "archive.history", "archive.tiers",
           "archive.writes", "archive.reads", "archive.contributors", "archive.brin_summary", "archive.simindex",
           "archive.materialized", "archive.chunk_copy", "archive.schema", "archive.exec_sink", "archive.exec_stream")


def test_importing_the_postgresql_side_does_not_import_pyspark():
    code = ("import importlib, sys\n"
            f"for m in {PG_SIDE!r}:\n"
            "    importlib.import_module(m)\n"
            "    spark = sorted(n for n in sys.modules if n.split('.')[0] == 'pyspark')\n"
            "    if spark:\n"
            "        sys.exit(f'importing {m} imported {spark[:3]}')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr.strip().splitlines()[-1]


def test_the_spark_side_still_imports_without_starting_spark():
    code = "import sys, archive.spark_sink, archive.exec_udf, archive.shared; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"
