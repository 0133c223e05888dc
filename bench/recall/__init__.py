"""Recall benchmarks: time to first result as the archive grows, stride vs FIFO fairness."""
