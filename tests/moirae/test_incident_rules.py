"""Incidents follow the event-query's own window (M 3.3): the rule is read from the
operator graph the provenance wrappers record, whatever the window's length, and the
incident store groups by it, here and in a read-only store of another process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ananke.graph import OperatorGraph
from moirae.incidents.rules import rule_from_graph, sink_window
from moirae.incidents.store import IncidentStore
from moirae.ingest.events import EventLog, EventRecord
from similarity.incidents import IncidentRule, group

H = timedelta(hours=1)


def windowed(size: timedelta, slide: timedelta | None = None, keys=("key",), then_window: timedelta | None = None):
    g = OperatorGraph()
    s = g.add("source", "load")
    node = g.add("window", "w", [(s, size)], size=size, slide=slide or size, keys=tuple(keys))
    if then_window is not None:
        node = g.add("window", "w2", [(node, then_window)], size=then_window, slide=then_window, keys=())
    f = g.add("filter", "f", [(node, timedelta(0))])
    g.add("sink", "hot", [(f, timedelta(0))])
    return g


@pytest.mark.parametrize("size", [timedelta(minutes=5), H, timedelta(days=1)])
def test_consecutive_windows_of_any_length_form_one_incident(size):
    rule = rule_from_graph(windowed(size), "hot", ["key", "avg", "eid", "ts"], "eid")
    assert rule == IncidentRule(("key",), size, size)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ends = [t0 + i * size for i in (1, 2, 3, 4, 5, 6, 7)] + [t0 + 12 * size]  # 7 consecutive, then apart
    ids = group(["a"] * len(ends), ends, [f"e{i}" for i in range(len(ends))], rule)
    assert list(ids) == ["e0"] * 7 + ["e7"]
    one_quiet = group(["a", "a"], [ends[0], ends[2]], ["x", "y"], rule)  # one quiet window between
    assert list(one_quiet) == ["x", "x"]


def test_sliding_window_uses_its_slide_and_the_window_nearest_the_sink():
    assert sink_window(windowed(H, timedelta(minutes=10)), "hot") == (H, timedelta(minutes=10), ("key",))
    rule = rule_from_graph(windowed(H, timedelta(minutes=10)), "hot", ["key", "eid", "ts"], "eid")
    assert rule.step == H + timedelta(minutes=10)
    # a window over windows: the outer one (nearest the sink) is the query's cadence
    assert sink_window(windowed(timedelta(minutes=5), then_window=timedelta(days=1)), "hot")[0] == timedelta(days=1)


def test_no_window_no_rule_and_keys_the_events_lost_fall_back_to_text_columns():
    g = OperatorGraph()
    s = g.add("source", "load")
    g.add("sink", "hot", [(g.add("filter", "f", [(s, timedelta(0))]), timedelta(0))])
    assert rule_from_graph(g, "hot", ["key", "eid", "ts"], "eid") is None
    rule = rule_from_graph(windowed(H), "hot", ["host", "avg", "eid", "ts"], "eid", text_columns=["host", "eid"])
    assert rule.keys == ("host",) and rule.window == H


@pytest.mark.postgres
def test_store_follows_the_query_unless_configured_and_a_read_only_store_sees_the_rule(pg):
    log = EventLog(pg)
    store = IncidentStore(pg, events=log)
    log.listeners.append(store.record)
    store.follow("hot", IncidentRule(("key",), H, H))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    log.add([EventRecord("hot", f"a{i}", t0 + i * H - timedelta(microseconds=1), {"key": "a", "avg": 95.0})
             for i in range(1, 8)])
    (inc,), total = store.list(event="hot")
    assert total == 1 and inc["alerts"] == 7 and inc["duration_s"] == pytest.approx(7 * 3600)
    other = IncidentStore(pg)  # another process: a read-only console
    assert other.list(event="hot")[0][0]["duration_s"] == pytest.approx(7 * 3600)
    assert other.config("hot").rule == IncidentRule(("key",), H, H)
    # a user's configuration wins, and what it leaves out comes from the query
    cfg = store.configure("hot", metric="avg", threshold=80.0)
    assert cfg.rule == IncidentRule(("key",), H, H) and cfg.metric == "avg"
    store.follow("hot", IncidentRule(("key",), timedelta(minutes=5)))
    assert store.config("hot").rule.window == H
