"""The test suite, a package so that helpers are imported by their full name
(``tests.archive.arch_helpers``) and child processes run as modules from the repository
root (``python -m tests.moirae.engine_child``).

Shared fixtures are in ``tests/conftest.py``, the one engine factory in
``tests/engine_factory.py``, and the run policy (markers derived from fixtures, the
``make test-quick`` guard, skipped areas and Hypothesis examples under CI) in
``tests/areas.py``.
"""
