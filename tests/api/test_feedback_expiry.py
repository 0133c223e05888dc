"""A running engine discards the recall of an event left without feedback past
``recall.feedback_timeout`` (M 4.4): its suspended tasks leave the scheduler, and its end
is recorded so a restart does not resume it. Without the engine's periodic job the
suspended tasks stayed open for ever (the live soak's open tasks grew with every alert).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archive.streams import StreamSpec
from recall.operator import Recall
from tests.api.api_helpers import T0, add_event, suspended, wait_for
from tests.engine_factory import make_engine

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_suspended_tasks_past_the_feedback_timeout_are_discarded(engine):
    e = engine
    e.deploy.manager.register(Recall(
        "hist_short", "SELECT h.sid, count(*) AS n FROM metrics h WHERE h.sid = :sid GROUP BY h.sid",
        store=e.archiver, feedback_period=1, feedback_timeout=1.0))
    e.start()
    kept = add_event(e, "kept", 170)  # the fixture's "hist": a 600 s timeout
    rec = add_event(e, "short", 175, submit=False)
    e.deploy.manager.submit(rec.as_event(), ["hist_short"])
    wait_for(lambda: suspended(e, "kept"), what="the long-timeout task suspended")
    wait_for(lambda: not e.deploy.manager.tasks("short") or all(
        t.state.value not in ("runnable", "running", "suspended", "ending") for t in e.deploy.manager.tasks("short")),
        timeout=30, what="the short-timeout event's tasks discarded")
    assert suspended(e, kept.eid)  # its deadline is far: still waiting for feedback
    wait_for(lambda: "short" not in {r.eid for r in e.deploy.events.open_events()}, timeout=30,
             what="the discarded event's end recorded")  # written by the output path, just after


def test_the_configured_feedback_timeout_applies_to_operators_without_their_own(pg, tmp_path, monkeypatch):
    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    e = make_engine(pg, tmp_path / "data",
                    archive={"chunk_span": "10m", "chunk_target_rows": 0},
                    recall={"feedback_timeout": "1s", "feedback_period": 1})
    try:
        e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}))
        n = 3 * 360
        e.archiver.append("metrics", -1, pd.DataFrame({"ts": pd.date_range(T0, periods=n, freq="10s"),
                                                       "sid": ["s0"] * n, "bw": np.ones(n)}), bulk=True)
        e.deploy.manager.register(Recall("hist", "SELECT count(*) AS n FROM metrics h WHERE h.sid = :sid",
                                         store=e.archiver))
        e.start()
        add_event(e, "ev", 170)
        wait_for(lambda: all(t.state.value not in ("runnable", "running", "suspended", "ending")
                             for t in e.deploy.manager.tasks("ev")), timeout=30, what="the event's tasks discarded")
        wait_for(lambda: "ev" not in {r.eid for r in e.deploy.events.open_events()}, timeout=30,
                 what="the discarded event's end recorded")
    finally:
        e.close()
