"""The norm judge on hypothesis-generated revision sequences (pure): whatever the order
and number of revisions, the final verdict is the rule applied to the last norm, and every
crossing of the line is reported as one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from moirae.rules.norm import NormJudge, NormRule
from recall.api import Interval, Output, OutputKind

T = datetime(2026, 1, 1, tzinfo=UTC)
norms = st.lists(st.tuples(st.floats(0, 200), st.floats(0.5, 50)), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(norms=norms, value=st.floats(0, 300), k=st.sampled_from([1.0, 2.0, 3.0]),
       kind=st.sampled_from(["suppress", "escalate"]))
def test_final_verdict_is_the_rule_on_the_last_norm(norms, value, k, kind):
    judge = NormJudge(NormRule("r", "ev", "norm", kind, k))
    states, seen = [], []
    for i, (mean, sd) in enumerate(norms):
        out = Output("norm", "e1", T, OutputKind.INSERT if i == 0 else OutputKind.UPDATE, i + 1, "s",
                     {"sid": "s", "mean_bw": mean, "sd_bw": sd}, Interval(T - timedelta(hours=i + 1), T))
        v = judge.on_output(out, {"sid": "s", "avg_bw": value})
        if v is not None:
            states.append(v.state)
        seen.append(judge.verdicts["e1"].state)
    final = judge.on_output(Output("norm", "e1", T, OutputKind.BOUNDARY, len(norms) + 1, "", {}, None), None)
    mean, sd = norms[-1]
    z = (value - mean) / sd
    on = abs(z) <= k if kind == "suppress" else abs(z) >= k
    expect = ("suppressed" if on else "raised") if kind == "suppress" else ("escalated" if on else "normal")
    last = final.state if final is not None else seen[-1]
    assert last == expect and (final is None or final.final)
    assert judge.crossings == sum(1 for a, b in zip(seen, seen[1:], strict=False) if a != b)
    assert "e1" not in judge.verdicts  # the boundary frees the event's state
