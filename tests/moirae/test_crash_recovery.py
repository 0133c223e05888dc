"""Crash recovery (DESIGN.md §6 "Nothing is lost"): the engine process is SIGKILLed
mid-stream while recall tasks are open, then restarted on the same data directory and
database. The archive equals the source (no loss, no duplicates), every provenance edge
points at an archived source tuple and each graph item is stored once, and the events
whose recall was open before the kill get their history after the restart. The fault
suite's ``tests/faults/test_sigkill.py`` does the same with 3 kills at seeded delays;
both run through ``kill_restart``."""

from __future__ import annotations

import pytest

from tests.moirae.kill_restart import check_recovered, run_with_kills

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def test_sigkill_with_open_recall_then_restart(pg, tmp_path):
    if pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the process-kill test (slow)")
    run = run_with_kills(pg, tmp_path, [0.0])  # killed as soon as it reports an open recall
    assert run.reported_open[0] > 0
    assert run.killed_open, "the kill should leave events whose recall had not ended"
    check_recovered(pg, run)
