"""The fronts show how far each history search went and what remains (recall.replica2):
the terminal board's similar-incidents line and NOVEL label, and the API's ``searches``
view (moirae.read.search_view). Pure: bus items and dicts, no engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from moirae.cli.board import Board
from moirae.read.search_view import searches
from recall.api import Interval, Output, OutputKind
from similarity.incidents import IncidentRule, IncidentTracker

T0 = datetime(2026, 1, 8, tzinfo=UTC)


def _board():
    tr = IncidentTracker(IncidentRule(("sid",), timedelta(minutes=5)))
    b = Board({"similar"}, lambda m: tr.assign(m["eid"], m["attrs"]["sid"], m["ts"]).incident)
    b.apply({"type": "event", "event": "overload", "eid": "e1", "ts": T0.isoformat(), "attrs": {"sid": "s1"},
             "context": [{"user": "backup"}]})
    return b


def _status(seq, row):
    return Output("similar", "e1", T0, OutputKind.INSERT, seq, "__status__", row,
                  Interval(T0 - timedelta(days=3), T0))


def test_the_board_says_how_far_back_a_search_went_and_what_remains():
    b = _board()
    b.apply(_status(1, {"status": "searching", "searched_back_to": "2025-10-01T00:00:00+00:00",
                        "remaining_chunks": 120}))
    text = b.render("e1")
    assert "searching, searched back to 2025-10-01 00:00, 120 chunk(s) of older history to go" in text
    assert "NOVEL" not in text


def test_novel_of_a_span_says_the_span_and_of_the_whole_archive_says_so():
    b = _board()
    b.apply(_status(1, {"status": "exhausted", "novel": True, "whole_archive": False,
                        "searched_back_to": "2025-12-15T00:00:00+00:00",
                        "novel_span": ["2025-12-15T00:00:00+00:00", T0.isoformat()]}))
    head = b.render("e1").splitlines()[0]
    assert "NOVEL: no similar past incident since 2025-12-15 00:00 (older history not searched)" in head
    b.apply(_status(2, {"status": "novel", "novel": True, "whole_archive": True,
                        "searched_back_to": "2024-01-01T00:00:00+00:00",
                        "novel_span": ["2024-01-01T00:00:00+00:00", T0.isoformat()]}))
    head = b.render("e1").splitlines()[0]
    assert head.endswith("NOVEL: no similar past incident")


def test_the_searches_view_reads_a_running_task_and_an_ended_status():
    results = {"similar": {"similarity": True, "covered": ["2026-01-05T00:00:00+00:00", T0.isoformat()],
                           "current": [{"key": "__status__", "row": {
                               "status": "exhausted", "searched_back_to": "2026-01-05T00:00:00+00:00",
                               "remaining_chunks": None, "materialized_until": "2026-01-05T00:00:00+00:00",
                               "reprocessed_chunks": None, "whole_archive": False, "novel": True,
                               "novel_span": ["2026-01-05T00:00:00+00:00", T0.isoformat()]}}]},
               "norm": {"similarity": False, "covered": ["2026-01-01T00:00:00+00:00", T0.isoformat()],
                        "current": []}}
    tasks = [{"operator": "norm", "state": "running", "materialization": False, "remaining_chunks": 40,
              "searched_back_to": "2025-12-01T00:00:00+00:00", "materialized_until": "2026-01-01T00:00:00+00:00",
              "reprocessed_chunks": 7},
             {"operator": "replica_x", "state": "running", "materialization": True, "remaining_chunks": 3}]
    got = searches(tasks, results)
    assert set(got) == {"similar", "norm"}
    assert got["similar"]["whole_archive"] is False and got["similar"]["novel_span"][0] == "2026-01-05T00:00:00+00:00"
    assert got["norm"] == {"state": "running", "searched_back_to": "2025-12-01T00:00:00+00:00",
                           "remaining_chunks": 40, "materialized_until": "2026-01-01T00:00:00+00:00",
                           "reprocessed_chunks": 7, "whole_archive": None}
