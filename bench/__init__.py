"""Benchmarks, grouped by area (``archive``, ``recall``, ``scheduler``, ``similarity``,
``engine``, ``provenance``), on one harness (:mod:`bench.harness`). Run them with
``python -m bench [NAME ...]``; results go to ``bench/results`` and BENCHMARKS.md. Not
installed with the package: they run from a checkout."""
