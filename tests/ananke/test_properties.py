"""Properties of ANK-1 over random sink-tuple / watermark sequences (A 3: R-V, R-E, R-L).

Scenario generator: sources with random event times; two sinks whose tuples take as
provenance any sources within U before them (what Theorem 4.1 allows); each sink's tuples
arrive out of order by up to the allowed lateness L, and its watermark, when advanced,
is the newest arrival key minus L (so no later tuple is older than it: Definition 2.1).
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from ananke.ank1 import Ank1
from ananke.items import ListSink, SinkTuple
from tests.ananke.ank_helpers import at

U_S, L_S = 10, 4  # U and the allowed lateness, in seconds
T0 = at(8, 0)


def sec(s: float):
    return T0 + timedelta(seconds=s)


@st.composite
def scenarios(draw):
    n_src = draw(st.integers(1, 25))
    src_ts = [draw(st.integers(0, 60)) for _ in range(n_src)]
    sink_tuples = []
    for k in range(draw(st.integers(1, 30))):
        ts = draw(st.integers(0, 70))
        eligible = [i for i, s in enumerate(src_ts) if ts - U_S <= s <= ts]
        prov = draw(st.lists(st.sampled_from(eligible), unique=True, max_size=5)) if eligible else []
        sink = draw(st.sampled_from(["K1", "K2"]))
        jitter = draw(st.integers(0, L_S))
        wm_after = draw(st.booleans())
        sink_tuples.append((ts + jitter, sink, k, ts, prov, wm_after))
    sink_tuples.sort(key=lambda r: (r[0], r[2]))
    return src_ts, sink_tuples


def run(src_ts, sink_tuples):
    out = ListSink()
    ank = Ank1(("K1", "K2"), timedelta(seconds=U_S)).build(out)
    fed: list[tuple[int, int]] = []
    state_ok = True
    for arrival, sink, k, ts, prov, wm_after in sink_tuples:
        ank.on_tuple(sink, SinkTuple(1000 + k, sec(ts), {"k": k}), [(i, sec(src_ts[i])) for i in prov])
        fed.extend((i, 1000 + k) for i in prov)
        if wm_after:
            ank.on_watermark(sink, sec(arrival - L_S))
            w = ank.watermark()
            if w is not None:
                state_ok &= all(sec(src_ts[i]) >= w - timedelta(seconds=U_S)
                                for i in range(len(src_ts)) if ank.is_alive(i))
    for sink in ("K1", "K2"):
        ank.on_watermark(sink, sec(1000))
    return ank, out.items, fed, state_ok


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_rv_re_rl_hold_and_nothing_alive_is_labelled(scenario):
    src_ts, sink_tuples = scenario
    ank, items, fed, state_ok = run(src_ts, sink_tuples)
    assert ank.stats.late == 0
    vertex_ts, vertex_pos = {}, {}
    edges, last_edge = {}, {}
    labels = {}
    for pos, it in enumerate(items):
        if it.kind in ("source", "sink"):
            key = (it.kind, it.id)
            assert key not in vertex_ts, f"vertex {key} emitted twice (R-V)"
            vertex_ts[key], vertex_pos[key] = it.ts, pos
        elif it.kind == "edge":
            key = (it.source_id, it.sink_id)
            assert key not in edges, f"edge {key} emitted twice (R-E)"
            for v in (("source", it.source_id), ("sink", it.sink_id)):
                assert v in vertex_ts and vertex_pos[v] < pos and vertex_ts[v] <= it.ts, f"edge {key} before {v}"
                assert v not in labels, f"edge {key} after the expired label of {v}"
                last_edge[v] = it.ts
            edges[key] = it.ts
        else:
            key = (it.vertex_kind, it.vertex_id)
            assert key not in labels, f"label {key} emitted twice (R-L)"
            assert key in vertex_ts and it.ts >= last_edge.get(key, vertex_ts[key])
            labels[key] = it.ts
    # completeness: every provenance entry became an edge, every vertex got its label
    assert set(edges) == set(fed)
    assert set(labels) == set(vertex_ts)
    assert {v for v in vertex_ts if v[0] == "source"} == {("source", i) for i, _ in fed}
    assert state_ok and ank.state_size() == 0


@settings(max_examples=30, deadline=None)
@given(scenarios(), st.integers(1, 20))
def test_late_sink_tuples_are_refused_not_emitted(scenario, back):
    src_ts, sink_tuples = scenario
    ank, items, _, _ = run(src_ts, sink_tuples)
    before = len(items)
    ank.on_tuple("K1", SinkTuple(1, sec(1000 - back)), [(0, sec(src_ts[0]))])
    assert ank.stats.late == 1 and ank.state_size() == 0
    assert len(items) == before
