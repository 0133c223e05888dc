"""Incident grouping: one rule, three ways to apply it, the same incidents."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from similarity.errors import InvalidSimilarityConfig
from similarity.incidents import (
    CLOSE_AFTER_STEPS,
    BackwardIncidents,
    IncidentRule,
    IncidentTracker,
    LiveIncidents,
    group,
)

RULE = IncidentRule(keys=("sid",), window=timedelta(minutes=5))
T0 = np.datetime64("2026-03-01T00:00", "ns")


def at(minutes: int) -> np.datetime64:
    return T0 + np.timedelta64(minutes, "m")


def test_six_windows_are_one_incident_and_a_long_silence_splits():
    ts = [at(5 * i) for i in range(6)] + [at(5 * 5 + 11)]
    ids = group(["s1"] * 7, ts, [f"e{i}" for i in range(7)], RULE)
    assert list(ids) == ["e0"] * 6 + ["e6"]


def test_one_quiet_window_does_not_split_but_two_do():
    ids = group(["s1"] * 3, [at(0), at(10), at(25)], ["a", "b", "c"], RULE)
    assert list(ids) == ["a", "a", "c"]


def test_keys_never_share_an_incident_and_input_order_does_not_matter():
    ids = group(["s2", "s1", "s2", "s1"], [at(5), at(0), at(0), at(5)], ["d", "a", "c", "b"], RULE)
    assert list(ids) == ["c", "a", "c", "a"]


def test_several_key_attributes_and_a_missing_one_is_named():
    rule = IncidentRule(keys=("sid", "dc"), window=timedelta(minutes=5))
    assert rule.key_of({"sid": "s1", "dc": 2}) == '["s1", 2]'
    with pytest.raises(InvalidSimilarityConfig, match="'dc'"):
        rule.key_of({"sid": "s1"})


@pytest.mark.parametrize("kwargs", [{"window": timedelta(0)}, {"window": timedelta(minutes=5), "gap": timedelta(-1)},
                                    {"window": 5}])
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(InvalidSimilarityConfig):
        IncidentRule(keys=("sid",), **kwargs)


detections = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 400)), min_size=1, max_size=60,
                      unique_by=lambda d: d[1])


@settings(max_examples=150, deadline=None)
@given(detections, st.lists(st.integers(0, 400), max_size=6))
def test_backward_batches_equal_grouping_everything_seen(dets, cuts):
    """Read newest first in time-disjoint batches, the ids after each batch are the
    whole-set grouping's, and every rename reported is exactly an id that changed."""
    keys = [k for k, _ in dets]
    ts = [at(m) for _, m in dets]
    eids = [f"e{m:03d}" for _, m in dets]
    edges = [10_000, *sorted(set(cuts), reverse=True), -1]
    back = BackwardIncidents(RULE)
    seen: list[int] = []
    held: dict[int, str] = {}
    for hi, lo in pairwise(edges):
        idx = [i for i, (_, m) in enumerate(dets) if lo < m <= hi]
        if not idx:
            continue
        ids, renames = back.add_older([keys[i] for i in idx], [ts[i] for i in idx], [eids[i] for i in idx])
        for i in held:
            held[i] = renames.get(held[i], held[i])
            assert back.current(held[i]) == held[i]
        held.update(dict(zip(idx, ids, strict=True)))
        seen += idx
        expected = group([keys[i] for i in seen], [ts[i] for i in seen], [eids[i] for i in seen], RULE)
        assert [held[i] for i in seen] == list(expected)


def test_backward_refuses_a_newer_batch():
    back = BackwardIncidents(RULE)
    back.add_older(["a"], [at(10)], ["x"])
    with pytest.raises(ValueError, match="'a'"):
        back.add_older(["a"], [at(20)], ["y"])


@settings(max_examples=100, deadline=None)
@given(detections)
def test_live_tracker_in_time_order_equals_grouping(dets):
    dets = sorted(dets, key=lambda d: d[1])
    tr = IncidentTracker(RULE)
    live = [tr.assign(f"e{m:03d}", k, at(m)).incident for k, m in dets]
    assert live == list(group([k for k, _ in dets], [at(m) for _, m in dets], [f"e{m:03d}" for _, m in dets], RULE))


def test_tracker_closes_quiet_keys_and_restores():
    tr = IncidentTracker(RULE)
    tr.assign("x", "a", at(0))
    tr.assign("y", "b", at(30))
    assert tr.close_before(at(16)) == ["x"]
    assert tr.open_incident("a") is None and tr.open_incident("b") == "y"
    tr.restore("a", "x", at(0), at(5), 2)
    assert tr.assign("z", "a", at(10)).incident == "x"


def _chained(keys: list[str], minutes: list[int], eids: list[str]) -> list[str]:
    """Reference grouping in plain Python: per key, detections by (time, eid), a new
    incident wherever two neighbours are more than a step apart; its id the first eid."""
    step = RULE.step / timedelta(minutes=1)
    out: dict[int, str] = {}
    for key in set(keys):
        mine = sorted((m, e, i) for i, (k, m, e) in enumerate(zip(keys, minutes, eids, strict=True)) if k == key)
        current, last = None, None
        for m, e, i in mine:
            if last is None or m - last > step:
                current = e
            out[i], last = current, m
    return [out[i] for i in range(len(keys))]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "10", "9"]), st.integers(0, 120), st.integers(0, 30)),
                min_size=1, max_size=40, unique_by=lambda d: d[2]))
def test_grouping_equals_a_plain_python_chaining_with_tied_times(dets):
    """Equal times included: the tie goes to the smaller eid, as text ('e10' < 'e9')."""
    keys, minutes, eids = [k for k, _, _ in dets], [m for _, m, _ in dets], [f"e{x}" for _, _, x in dets]
    assert list(group(keys, [at(m) for m in minutes], eids, RULE)) == _chained(keys, minutes, eids)


def test_live_incidents_keep_one_tracker_per_event_type_and_close_old_keys():
    reopened = []
    live = LiveIncidents(lambda event, attrs: RULE, reopen=lambda event, tr: reopened.append(event))
    a = live.assign("overload", "e1", {"sid": "s1"}, at(0))
    b = live.assign("overload", "e2", {"sid": "s1"}, at(5))
    c = live.assign("failure", "f1", {"sid": "s1"}, at(5))
    assert (a.incident, a.opened, b.incident, b.opened, b.count) == ("e1", True, "e1", False, 2)
    assert c.incident == "f1" and reopened == ["overload", "failure"]
    live.assign("overload", "e3", {"sid": "s2"}, at(40))
    # s1's last detection (5 min) is more than CLOSE_AFTER_STEPS steps behind 40 min: closed
    assert live.close("overload", at(40)) == ["e1"]
    assert live.open_count("overload") == 1 and live.open_count("failure") == 1
    assert live.horizon(RULE) == CLOSE_AFTER_STEPS * RULE.step
    live.forget("failure")
    assert live.open_count("failure") == 0 and live.close("nothing", at(0)) == []


def test_a_live_detection_without_its_key_is_its_own_incident():
    live = LiveIncidents(lambda event, attrs: RULE)
    a = live.assign("overload", "e1", {"host": "h"}, at(0))
    assert (a.key, a.incident, a.opened) == ("e1", "e1", True)
    assert "sid" in a.unkeyed
    assert live.assign("overload", "e2", {"sid": "s1"}, at(0)).unkeyed is None
