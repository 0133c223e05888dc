"""A history-query over a present chunk of a clustered stream brings the chunk's BRIN
summaries up to date first (archive.archiver.Archiver.summarize_for), through the
stream's summarizer (archive.brin_summary.Summarizer.now, registered by its live window
reader, moirae.ingest.window_provenance): it then reads its key's ranges, not every page
written since the summarizer's last pass, and returns the same rows."""

from __future__ import annotations

import gc
import weakref
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from archive import contributors
from archive.brin_summary import Summarizer, summarize
from archive.contributors import ensure_time_index, time_index
from tests.archive.arch_helpers import T0

pytestmark = pytest.mark.postgres

QUERY = "SELECT count(*) AS c, sum(h.n) AS s FROM metrics h WHERE h.host = :host"


def _frame(n: int, start=T0) -> pd.DataFrame:
    i = np.arange(n)
    return pd.DataFrame({"ts": [start + timedelta(milliseconds=int(x)) for x in i * 80],
                         "host": [f"h{x % 100:03d}" for x in i], "v": i / 4, "n": i})


def _unsummarized(archiver) -> int:
    """Page ranges of the stream's chunks not summarized yet (summarizes them)."""
    return summarize(archiver, "metrics", [c.chunk_id for c in archiver.chunks("metrics")],
                     time_index(archiver, "metrics"))


def test_a_history_query_summarizes_the_present_chunks_it_reads_first(archiver, monkeypatch):
    monkeypatch.setattr(contributors, "PAGES_PER_RANGE", 4)
    ensure_time_index(archiver, "metrics", ["host"])
    archiver.append("metrics", 0, _frame(40_000))
    s = Summarizer(archiver, "metrics", lambda: time_index(archiver, "metrics"), 60.0)
    archiver.summarizers["metrics"] = s.now
    query = archiver.prepare(QUERY)
    chunk = archiver.grid_for(("metrics",)).chunk_of(T0)
    got = archiver.run_history_query(query, {"host": "h042"}, chunk).to_dict("records")
    i = np.arange(40_000)
    assert got == [{"c": 400, "s": int(i[i % 100 == 42].sum())}]
    assert s.stats["now"] == 1 and s.stats["now_ranges"] > 0
    assert _unsummarized(archiver) == 0  # nothing left for the background pass

    # the same rows without a summarizer (a stream no live window reads)
    del archiver.summarizers["metrics"]
    assert archiver.run_history_query(query, {"host": "h042"}, chunk).to_dict("records") == got
    assert s.stats["now"] == 1


def test_a_chunk_behind_the_horizon_is_not_summarized_and_a_failing_summarizer_only_slows(archiver, caplog):
    ensure_time_index(archiver, "metrics", ["host"])
    archiver.append("metrics", 0, _frame(2_000))
    calls = []
    archiver.summarizers["metrics"] = lambda lo, hi: calls.append((lo, hi)) or 0
    query = archiver.prepare(QUERY)
    grid = archiver.grid_for(("metrics",))
    chunk = grid.chunk_of(T0)
    want = archiver.run_history_query(query, {"host": "h007"}, chunk).to_dict("records")
    lo, hi = grid.bounds(chunk)
    assert calls == [(lo, hi - timedelta(microseconds=1))]  # the interval's chunks, not the next one
    archiver.demote(grid.bounds(chunk)[1])  # the chunk leaves the present tier
    assert archiver.run_history_query(query, {"host": "h007"}, chunk).to_dict("records") == want
    assert len(calls) == 1

    def broken(lo, hi):
        raise RuntimeError("no summaries today")

    archiver.summarizers["metrics"] = broken
    later = grid.chunk_of(T0 + timedelta(days=1))
    archiver.append("metrics", 1, _frame(2_000, start=T0 + timedelta(days=1)))
    with caplog.at_level("WARNING", logger="archive.archiver"):
        got = archiver.run_history_query(query, {"host": "h007"}, later).to_dict("records")
    assert got == want and "no summaries today" in caplog.text


def test_a_live_window_reader_registers_its_summarizer_for_history_queries(archiver):
    from ananke.digest import DigestSpec
    from moirae.ingest.window_provenance import ArchiveResolver

    class Waits:
        def written(self, name):
            return 0

    r = ArchiveResolver(archiver, DigestSpec("metrics", "ts", ("host",)), Waits(), 1.0)
    try:
        assert "metrics" in archiver.summarizers
        archiver.append("metrics", 0, _frame(20_000))
        query = archiver.prepare(QUERY)
        archiver.run_history_query(query, {"host": "h001"}, archiver.grid_for(("metrics",)).chunk_of(T0))
        assert r.summaries.stats["now"] == 1 and _unsummarized(archiver) == 0
    finally:
        r.stop()
    ref = weakref.ref(r.summaries)
    del r
    gc.collect()
    assert ref() is None  # the registration does not keep the summarizer alive
    assert archiver.summarizers["metrics"](T0, T0 + timedelta(hours=1)) == 0
