"""The engine's Spark session (moirae/spark.py) as the JVM sees it."""

from moirae.spark import DRIVER_MEMORY


def test_the_driver_heap_is_fixed_at_start(spark):
    """``-Xms`` equals ``-Xmx``: the driver commits its whole heap when it starts instead
    of growing it in steps minutes into a steady load (which the memory soak read as
    growth)."""
    heap = spark._jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    size = int(DRIVER_MEMORY.rstrip("g")) * 2**30
    assert heap.getInit() == size
    assert heap.getMax() == size
    assert heap.getCommitted() >= size * 0.9
