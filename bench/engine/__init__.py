"""Whole-engine benchmarks: throughput and latency end to end, JVM sources, cluster workers,
the scenario source, the fault-injection suite's figures, and how the engine's costs grow
(cost curves)."""
