"""IncidentTop (recall.similarity_incidents) against brute force, for any detections:
after chunks are offered newest first, the held top k equals grouping the whole history
at once (similarity.incidents.group, the live event included and its incident dropped),
each incident represented by its best window, ranked by score, time and id. Scores come
from a small set so that ties (between windows and between incidents) are common."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recall.similarity_incidents import IncidentTop
from similarity.incidents import IncidentRule, group

RULE = IncidentRule(("k",), timedelta(minutes=5))
MIN = 60 * 10**9
LIVE_T = 125 * MIN

_det = st.tuples(st.integers(0, 119), st.sampled_from(["a", "b", "c", "d"]), st.sampled_from([0.0, 0.2, 0.5, 0.5, 0.9]))


def _brute(dets, live_key, k, rule):
    eids = [f"e{i:03d}" for i in range(len(dets))] + ["live"]
    ts = np.array([m * MIN for m, _, _ in dets] + [LIVE_T], dtype=np.int64)
    keys = [key for _, key, _ in dets] + [live_key] if rule is not None else eids
    r = rule or IncidentRule((), timedelta(microseconds=1), timedelta(0))
    ids = group(keys, ts.astype("datetime64[ns]"), eids, r)
    live = ids[-1]
    inc: dict[str, dict] = {}
    for i, (_m, _, s) in enumerate(dets):
        iid = ids[i]
        if iid == live:
            continue
        cur = inc.setdefault(iid, {"best": None, "n": 0, "first": ts[i], "last": ts[i]})
        cur["n"] += 1
        cur["first"], cur["last"] = min(cur["first"], ts[i]), max(cur["last"], ts[i])
        cand = (-s, -int(ts[i]), eids[i])
        if cur["best"] is None or cand < cur["best"]:
            cur["best"] = cand
    ranked = sorted((v["best"][0], v["best"][1], iid) for iid, v in inc.items() if v["best"][0] < 0)
    return [(iid, inc[iid]["best"][2], -s, inc[iid]["n"], int(inc[iid]["first"]), int(inc[iid]["last"]))
            for s, _, iid in ranked[:k]], live


@settings(max_examples=150, deadline=None)
@given(dets=st.lists(_det, max_size=60), cuts=st.lists(st.integers(1, 119), max_size=5),
       k=st.integers(1, 4), live_key=st.sampled_from(["a", "b", "z"]), with_rule=st.booleans())
@example(dets=[(5, "a", 0.5), (15, "a", 0.9)], cuts=[10], k=2, live_key="z", with_rule=True)  # a gap of one step
@example(dets=[(110, "a", 0.9), (116, "a", 0.5), (50, "a", 0.5)], cuts=[113], k=2, live_key="a", with_rule=True)
def test_held_top_k_equals_brute_force(dets, cuts, k, live_key, with_rule):
    dets = sorted(dets, key=lambda d: d[0])
    rule = RULE if with_rule else None
    top = IncidentTop(k, rule or IncidentRule((), timedelta(microseconds=1), timedelta(0)), "live",
                      live_key if with_rule else "live", np.datetime64(LIVE_T, "ns"), distinct_keys=not with_rule)
    bounds = sorted(set(cuts) | {0, 120}, reverse=True)
    eids = np.array([f"e{i:03d}" for i in range(len(dets))], dtype=object)
    minute = np.array([m for m, _, _ in dets], dtype=np.int64)
    held: dict[str, tuple] = {}
    for hi, lo in zip(bounds, bounds[1:], strict=False):  # chunks [lo, hi), newest first
        sel = np.flatnonzero((minute >= lo) & (minute < hi))
        keys = np.array([dets[i][1] for i in sel], dtype=object) if with_rule else eids[sel]
        deleted, inserted = top.offer(eids[sel], minute[sel] * MIN, keys,
                                      np.array([dets[i][2] for i in sel], dtype=np.float64))
        for p in deleted:
            assert held.pop(p.id) == (p.eid, p.score, p.windows), f"retracted {p.id} as it was not held"
        for p in inserted:
            assert p.id not in held
            held[p.id] = (p.eid, p.score, p.windows)
    want, live = _brute(dets, live_key, k, rule)
    got = [(p.id, p.eid, p.score, p.windows, p.first_ns, p.last_ns) for p in top.held]
    assert got == want
    assert held == {p.id: (p.eid, p.score, p.windows) for p in top.held}
    assert top.live_incident == live
