"""Spark's Python workers under moirae.runtime.worker_daemon: pyspark from its cached bytecode,
and collections that walk only what a task left."""

from __future__ import annotations

import gc
import weakref

import pytest

from moirae.runtime.worker_daemon import KEY, Freezing, daemon_config


@pytest.fixture
def thawed():
    """The test process's collector as it was: unfrozen afterwards."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.collect()


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_task_leaves_its_survivors_frozen_and_its_cycles_collected(thawed):
    dropped = []

    def task(sock, authenticated):  # a task that leaves one live object and one cycle of garbage
        keep = Node()
        dropped.append(weakref.ref(Node()))
        return keep

    run = Freezing(task, full_every=1000)
    kept = run(None, True)
    assert dropped[0]() is None  # the task's cyclic garbage was collected before the freeze
    assert gc.get_freeze_count() > 0
    assert kept.me is kept  # what the task returned lives on
    tracked = len(gc.get_objects())  # what a collection walks now: only what is new
    assert tracked < gc.get_freeze_count()


def test_a_frozen_cycle_that_becomes_garbage_is_reclaimed_at_the_full_collection(thawed):
    held = {"node": Node()}
    ref = weakref.ref(held["node"])
    run = Freezing(lambda sock, authenticated: 0, full_every=3)
    run(None, True)  # task 1: the node, alive, is frozen
    del held["node"]  # it is now garbage, but frozen: an ordinary collection passes it by
    gc.collect()
    assert ref() is not None
    run(None, True)  # task 2
    assert ref() is not None
    run(None, True)  # task 3: the full collection
    assert ref() is None


def test_a_local_master_gets_the_daemon_unless_the_user_named_one():
    assert daemon_config("local[2]", {}) == {KEY: "moirae.runtime.worker_daemon"}
    assert daemon_config("local[2]", {KEY: "my.daemon"}) == {}
    assert daemon_config("spark://127.0.0.1:7077", {}) == {}


@pytest.mark.spark
def test_the_sessions_workers_run_the_daemon_with_pyspark_from_site_packages(spark):
    def probe(_):
        import gc
        import os

        import pyspark

        with open(f"/proc/{os.getppid()}/cmdline") as f:
            parent = f.read().replace("\0", " ")
        yield pyspark.__file__, gc.get_freeze_count(), parent

    rdd = spark.sparkContext.parallelize(range(2), 2)
    rdd.mapPartitions(probe).collect()  # every worker has run a task
    for where, frozen, parent in rdd.mapPartitions(probe).collect():
        assert "moirae.runtime.worker_daemon" in parent
        assert "site-packages" in where and ".zip" not in where, where
        assert frozen > 10_000, f"{frozen} objects frozen after a task"
