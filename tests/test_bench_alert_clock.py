"""The alert clock's window-close instant (bench/engine/_alert_clock.py): its docstring example
runs (bench modules are outside the package doctest sweep)."""

import doctest

import bench.engine._alert_clock as alert_clock


def test_window_close_wall_examples_run():
    result = doctest.testmod(alert_clock)
    assert result.attempted >= 1 and result.failed == 0
