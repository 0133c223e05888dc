"""Scheduler benchmarks: stride proportional share against lottery and textbook stride."""
