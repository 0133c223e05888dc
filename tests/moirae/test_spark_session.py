"""The engine's Spark session (moirae/runtime/spark.py) as the JVM sees it."""

from pyspark.sql import functions as F

from moirae.runtime.spark import (
    CHECKPOINT_MANAGER_KEY,
    CHECKPOINT_MANAGERS,
    DRIVER_MEMORY,
    _filesystem_checkpoints,
)


def test_the_driver_heap_is_fixed_at_start(spark):
    """``-Xms`` equals ``-Xmx``: the driver commits its whole heap when it starts instead
    of growing it in steps minutes into a steady load (which the memory soak read as
    growth)."""
    heap = spark._jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    size = int(DRIVER_MEMORY.rstrip("g")) * 2**30
    assert heap.getInit() == size
    assert heap.getMax() == size
    assert heap.getCommitted() >= size * 0.9


def test_checkpoints_are_written_through_the_filesystem_api(spark):
    """The checkpoint file manager is the FileSystem-based one (no `readlink` process per
    rename), and the class is one this Spark loads."""
    name = spark.conf.get(CHECKPOINT_MANAGER_KEY)
    assert name in CHECKPOINT_MANAGERS
    spark._jvm.java.lang.Class.forName(name)


def test_a_user_choice_of_checkpoint_manager_is_kept(spark):
    spark.conf.set(CHECKPOINT_MANAGER_KEY, "com.example.MyManager")
    try:
        assert _filesystem_checkpoints(spark) == "com.example.MyManager"
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == "com.example.MyManager"
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        assert _filesystem_checkpoints(spark) in CHECKPOINT_MANAGERS


def test_a_stateful_query_resumes_from_its_checkpoint(spark, tmp_path):
    """With that manager, a windowed aggregation stops and restarts from its checkpoint:
    the second run reads only the new file, its state holds the first run's rows, and no
    temporary file is left behind."""
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    out: list[tuple[int, int]] = []  # (batch id, sum of the window)

    def run() -> None:
        df = (spark.readStream.schema("ts timestamp, k string, v long").json(str(src))
              .withWatermark("ts", "0 seconds").groupBy(F.window("ts", "10 seconds"), "k")
              .agg(F.sum("v").alias("s")))
        q = (df.writeStream.outputMode("update")
             .foreachBatch(lambda b, i: out.extend((i, r["s"]) for r in b.collect()))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    (src / "1.json").write_text('{"ts": "2025-01-01T00:00:01Z", "k": "a", "v": 1}\n'
                                '{"ts": "2025-01-01T00:00:02Z", "k": "a", "v": 2}\n')
    run()
    (src / "2.json").write_text('{"ts": "2025-01-01T00:00:03Z", "k": "a", "v": 4}\n')
    run()
    (first, three), (second, seven) = out  # one emitting batch per run, one key
    assert (first, three, seven) == (0, 3, 7)  # 7, not 4: the state came back
    assert second > first  # resumed: a fresh start would be batch 0 again
    commits = {int(p.name) for p in (ckpt / "commits").iterdir() if not p.name.startswith(".")}
    assert {first, second} <= commits
    assert [p.name for p in ckpt.rglob("*") if p.name.endswith(".tmp")] == []
