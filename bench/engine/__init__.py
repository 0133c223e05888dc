"""Whole-engine benchmarks: throughput and latency end to end, JVM sources, cluster workers,
the scenario source, and the fault-injection suite's figures."""
