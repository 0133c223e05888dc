"""Hadoop's local file system without a chmod process per file (moirae.runtime.hadoop_fs)."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from moirae.runtime import hadoop_fs
from moirae.runtime.hadoop_fs import CLASS, KEY, classes_dir, local_fs_config


def _processes_started() -> int:
    """Processes (and threads) this machine has started since boot."""
    with open("/proc/stat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("processes"))


NEEDS_JAVAC = pytest.mark.skipif(hadoop_fs._javac() is None,
                                 reason="no javac here: Hadoop's default file system stays (next tests)")


@NEEDS_JAVAC
def test_the_sessions_local_file_system_sets_permissions_without_a_process(spark, tmp_path):
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    assert fs.getClass().getName() == CLASS
    assert fs.getRawFileSystem().getClass().getName() == CLASS + "$Raw"
    n = 200
    runs = []
    for attempt in range(3):  # the counter is the machine's: other work adds to it, never takes away
        folder = tmp_path / f"run{attempt}"
        before = _processes_started()
        for i in range(n):  # as a checkpoint writes: a file and its checksum file, each given its mode
            fs.create(jvm.org.apache.hadoop.fs.Path(str(folder / f"f{i}")), True).close()
        runs.append(_processes_started() - before)
    assert min(runs) < n // 2, f"{runs} processes started for {n} files (the default starts one a file or more)"
    assert stat.S_IMODE(os.stat(folder / "f0").st_mode) == 0o644  # Hadoop's default 666 less its umask 022
    assert (folder / ".f0.crc").exists()  # still the checksummed file system
    path = jvm.org.apache.hadoop.fs.Path(str(folder / "f1"))
    for mode in ("640", "600", "755", "000"):
        fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert stat.S_IMODE(os.stat(folder / "f1").st_mode) == int(mode, 8)


def test_without_javac_the_default_stays_and_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(hadoop_fs, "_javac", lambda: None)
    with caplog.at_level(logging.WARNING, logger="moirae.runtime.hadoop_fs"):
        assert classes_dir(tmp_path) is None
    assert "no javac" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_a_failed_compile_keeps_the_default_and_leaves_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(hadoop_fs, "_javac", lambda: "/bin/false")  # a compiler that fails
    with caplog.at_level(logging.WARNING, logger="moirae.runtime.hadoop_fs"):
        assert classes_dir(tmp_path) is None
    assert "could not compile" in caplog.text
    assert list(tmp_path.iterdir()) == []


@NEEDS_JAVAC
def test_compiled_once_into_the_cache(tmp_path, monkeypatch):
    first = classes_dir(tmp_path)
    assert first is not None and (first / "moirae" / "hadoop" / "NioLocalFileSystem.class").exists()
    monkeypatch.setattr(hadoop_fs, "_javac", lambda: None)  # a second call needs no compiler
    assert classes_dir(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary directory left


@NEEDS_JAVAC
def test_a_cluster_master_or_a_users_choice_keeps_the_default():
    assert local_fs_config("spark://host:7077", {}) == {}
    assert local_fs_config("local[2]", {KEY: "org.example.MyFs"}) == {}
    conf = local_fs_config("local[2]", {"spark.driver.extraClassPath": "/opt/mine.jar"})
    assert conf[KEY] == CLASS
    mine, ours = conf["spark.driver.extraClassPath"].split(os.pathsep)
    assert mine == "/opt/mine.jar" and ours == str(classes_dir())
