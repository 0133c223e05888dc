"""Similarity benchmarks: end to end on the archive, quality of the ranking, scale."""
