"""Hadoop's local file system without a process per file (Spark's checkpoints).

Without Hadoop's native library, which pyspark does not ship, Hadoop's local file
system sets the permission of every file it creates by starting a ``chmod`` process.
Spark's streaming queries create several files per micro-batch (offsets, commits, state
store deltas, each with a checksum file), so a busy engine starts a ``chmod`` process
per file, many a second (BENCHMARKS.md has the figures).

``moirae/runtime/java/NioLocalFileSystem.java`` is the same file system, with the permission
set through ``java.nio`` (the same mode, no process). It is compiled once per source
and Spark version with ``javac`` into a cache directory and put on the driver's class
path, as ``fs.file.impl``, for a ``local`` master: there the executors are the
driver's JVM. On a cluster the workers would need the class too, so the default stays.
Without ``javac`` (a JRE only) the default stays as well, with one log line saying so.
A user's own ``spark.hadoop.fs.file.impl`` is kept.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

CLASS = "moirae.hadoop.NioLocalFileSystem"
SOURCE = Path(__file__).resolve().parent / "java" / "NioLocalFileSystem.java"
KEY = "spark.hadoop.fs.file.impl"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moirae"


def _hadoop_jars() -> list[str]:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return sorted(str(p) for p in jars.glob("hadoop-client-api-*.jar"))


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def classes_dir(root: Path | None = None) -> Path | None:
    """The directory holding the compiled class (compiled now if this source and
    Spark's Hadoop jar have not been), or None when it cannot be had (no ``javac``, no
    Hadoop jar, a failed compile: each logged)."""
    jars = _hadoop_jars()
    if not jars:
        log.warning("moirae: no hadoop-client-api jar in pyspark; Spark's checkpoints use Hadoop's default "
                    "local file system (a chmod process per file)")
        return None
    digest = hashlib.sha256(SOURCE.read_bytes() + "|".join(Path(j).name for j in jars).encode()).hexdigest()[:16]
    out = (root or cache_root()) / f"hadoop-fs-{digest}"
    if (out / "moirae" / "hadoop" / "NioLocalFileSystem.class").exists():
        return out
    javac = _javac()
    if javac is None:
        log.warning("moirae: no javac (a Java runtime without its compiler): Spark's checkpoints use Hadoop's "
                    "default local file system, which starts a chmod process per file")
        return None
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        subprocess.run([javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(jars), "-d", str(tmp),
                        str(SOURCE)], check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        detail = (getattr(exc, "stderr", None) or str(exc) or type(exc).__name__).strip().splitlines()
        log.warning("moirae: could not compile %s (%s); Spark's checkpoints use Hadoop's default local file system",
                    SOURCE.name, detail[0] if detail else type(exc).__name__)
        return None
    try:
        tmp.rename(out)  # atomic; another process may have finished first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out if out.exists() else None


def local_fs_config(master: str, extra: dict[str, str]) -> dict[str, str]:
    """The settings that put the file system in place for a ``local`` master (none
    when the user set ``fs.file.impl``, the master is a cluster, or it cannot be had)."""
    if not master.startswith("local") or KEY in extra:
        return {}
    classes = classes_dir()
    if classes is None:
        return {}
    path = extra.get("spark.driver.extraClassPath")
    return {KEY: CLASS, "spark.driver.extraClassPath": os.pathsep.join(p for p in (path, str(classes)) if p)}
