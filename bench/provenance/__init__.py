"""Provenance benchmarks: ANK-1 and ANK-N against backward-only provenance (A 6.1)."""
