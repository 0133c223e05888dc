"""The task-migration example (M fig. 10) at operator level: a node that first looks
heavy is revised to light; the final candidates under event and present analysis."""

from __future__ import annotations

import pytest

from recall.api import EndReason, Interval, Output, OutputKind
from tests.recall.operator.recall_op_helpers import pandas_partials
from tests.recall.operator.recall_op_migration import (
    DAY,
    EXPECTED,
    PINGS_AFTER,
    PINGS_BEFORE,
    T0,
    Pipeline,
    event,
    procs_history,
    recall_operator,
)


@pytest.mark.parametrize("analysis", ["event", "present"])
def test_migration_candidates(analysis):
    op, pipe = recall_operator(), Pipeline(analysis)
    for p in PINGS_BEFORE:
        pipe.on_ping(p)
    spec = op.task_for(event())
    assert spec.params == {"nodes": ["n1", "n2"]}
    state = op.start(spec)
    hist = procs_history()
    hist = hist[hist["node"].isin(spec.params["nodes"])]  # what the WHERE clause does in SQL
    covered = None
    seen = []
    for d in range(4, -1, -1):  # newest first
        chunk = Interval(T0 + d * DAY, T0 + (d + 1) * DAY)
        covered = chunk if covered is None else Interval(chunk.start, covered.end)
        part = hist[(hist["ts"] >= chunk.start) & (hist["ts"] < chunk.end)]
        for o in op.on_chunk(state, d, covered, pandas_partials(op.split, part)):
            pipe.on_output(o)
        if d == 4:
            # after the first chunk n1 looks heavy: only n2 is a candidate, in both analyses
            assert pipe.final() == {"n2": 10.0}
            for p in PINGS_AFTER:  # the network changes while history is being recalled
                pipe.on_ping(p)
        seen.append(set(pipe.final()))
    for o in op.on_end(state, EndReason.DONE):
        pipe.on_output(o)
    pipe.on_output(Output("mgr", spec.eid, spec.event_ts, OutputKind.BOUNDARY, state.seq + 1, "", {}, None))

    assert pipe.avg_cpu_history('["n1", "p1"]') == [("insert", 95.0), ("update", 52.5),
                                                    ("update", pytest.approx(115 / 3)),
                                                    ("update", 31.25), ("update", 27.0)]
    assert pipe.final() == EXPECTED[analysis]
    # n1 joins the candidates exactly when its history shows it light (third chunk)
    if analysis == "event":
        assert seen == [{"n2"}, {"n2"}, {"n1", "n2"}, {"n1", "n2"}, {"n1", "n2"}]
    else:
        assert seen == [{"n2"}] * 5
    # the boundary released every operator's state for the event
    for o in (pipe.worst, pipe.light, pipe.ping, pipe.near):
        assert "overload-n0" not in o.events
