"""Cancelled recall stays ended across a restart; recall the shutdown interrupted is
resumed (as after a crash). What a restart resumes is ``EventLog.open_events()``
(``DeployManager.start``), read here by a second engine on the same database."""

from __future__ import annotations

import pytest

from tests.api.api_helpers import add_event, suspended, wait_for
from tests.engine_factory import make_engine

pytestmark = pytest.mark.postgres


def test_restart_resumes_interrupted_recall_but_not_cancelled(engine, pg, tmp_path):
    for i, eid in enumerate(("a", "b", "c", "d")):
        add_event(engine, eid, 170 - i)
    wait_for(lambda: all(suspended(engine, e) for e in "abcd"), what="suspended")
    assert engine.cancel("b") == 1
    assert engine.cancel_many(["c", "d"]) == {"c": 1, "d": 1}
    engine.close()  # "a" is still open: its recall is interrupted by the shutdown
    again = make_engine(pg, tmp_path / "data2")
    try:
        assert {r.eid for r in again.deploy.events.open_events()} == {"a"}
    finally:
        again.close()
