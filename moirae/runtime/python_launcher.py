"""The interpreter Spark starts its Python processes with, for a local master on a
pip-installed PySpark: this Python, with the installed pyspark's own zips taken off
``PYTHONPATH``.

Spark puts ``pyspark/python/lib/pyspark.zip`` and the py4j zip first on the path of
every Python process it starts. Besides the UDF workers (which :mod:`moirae.runtime.worker_daemon`
serves) it starts, per streaming query on a Python data source, a source runner
(``python_streaming_source_runner``) and planner workers, each a fresh interpreter.
Importing pyspark from a zip compiles its modules from source every time (no bytecode
is cached for a zip), and ``importlib.invalidate_caches()``, which Spark's worker setup
calls once a process has added its files directory to the path, re-reads the whole
pyspark zip's directory: a noticeable CPU cost per process, paid by every query that
starts (BENCHMARKS.md has the figures). The zips are the
installed package's copies, the same release byte for byte, so site-packages, where
this Python finds the same modules, serves them instead.

The launcher is a POSIX shell script in the user's cache directory that filters
exactly those two paths out of ``PYTHONPATH`` and ``exec``\\ s this interpreter with
the arguments Spark gave (``-m <module>``). :func:`moirae.runtime.spark.spark_session` sets it
as ``PYSPARK_PYTHON`` when the user has not set one and the master is local; a
cluster's executors keep their own Python, whose paths the driver cannot judge.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from moirae.runtime.hadoop_fs import cache_root

SCRIPT = """#!/bin/sh
# Written by moirae.runtime.python_launcher: {python} without the installed pyspark's own zips on
# PYTHONPATH (site-packages holds the same modules, with cached bytecode).
set -f
keep=
IFS=:
for p in $PYTHONPATH; do
  case $p in
    {patterns}) ;;
    *) keep=${{keep:+$keep:}}$p ;;
  esac
done
unset IFS
PYTHONPATH=$keep
export PYTHONPATH
exec {python_q} "$@"
"""


def _quoted(text: str) -> str:
    """``text`` as one single-quoted shell word.

    >>> _quoted("/a b/it's.zip")
    "'/a b/it'\\\\''s.zip'"
    """
    return "'" + text.replace("'", "'\\''") + "'"


def _installed_dir(module: str) -> Path | None:
    """The directory ``module`` is imported from, if it is a plain directory (not a zip)."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin or not os.path.isfile(origin):
        return None
    return Path(origin).resolve().parent


def redundant_zips() -> list[str]:
    """The zips Spark will put on its workers' path that this Python can do without:
    the installed pyspark's ``python/lib`` zips, when pyspark (and, for the py4j zip,
    py4j) are themselves installed as directories."""
    pyspark_dir = _installed_dir("pyspark")
    if pyspark_dir is None:
        return []
    lib = pyspark_dir / "python" / "lib"
    out = []
    for zip_path in sorted(lib.glob("*.zip")):
        name = zip_path.name
        if name == "pyspark.zip" or (name.startswith("py4j-") and _installed_dir("py4j") is not None):
            out.append(str(zip_path))
    return out


def script_text(python: str, zips: list[str]) -> str:
    """The launcher's text.

    >>> print(script_text("/v/bin/python", ["/v/pyspark.zip"]).splitlines()[-1])
    exec '/v/bin/python' "$@"
    """
    return SCRIPT.format(python=python, python_q=_quoted(python), patterns="|".join(_quoted(z) for z in zips))


def launcher(root: Path | None = None) -> str | None:
    """The path of the launcher for this interpreter (written once into the cache), or
    None when there is nothing to take off the path or no launcher can be written."""
    if os.name != "posix" or not os.path.exists("/bin/sh"):
        return None
    zips = redundant_zips()
    if not zips:
        return None
    text = script_text(sys.executable, zips)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = (root or cache_root()) / f"python-launcher-{digest}"
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(path)  # atomic: a concurrent session sees the old file or the whole new one
    except OSError:
        return None
    return str(path)


def python_for_workers(master: str) -> str:
    """What ``PYSPARK_PYTHON`` should be when the user set none: the launcher for a
    local master, else this interpreter."""
    if master.startswith("local"):
        return launcher() or sys.executable
    return sys.executable
