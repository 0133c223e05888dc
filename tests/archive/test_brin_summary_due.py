"""A summarizer given a stamp of this process's writes (archive.brin_summary) makes a
background pass only when the stamp changed, or after IDLE_PASS_S for other
processes' writes; without a stamp every tick is a pass. The stamp the live path gives
it, ArchiveWaits.written, counts the batches that archived rows."""

from __future__ import annotations

from datetime import UTC, datetime

import archive.brin_summary as brin
from archive.abc import AppendResult
from archive.brin_summary import Summarizer
from moirae.ingest.archive_waits import ArchiveWaits


def test_a_pass_waits_for_new_writes_or_the_idle_period(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(brin.time, "monotonic", lambda: clock[0])
    stamp = [0]
    s = Summarizer(None, "m", lambda: "ix", 0.05, written=lambda: stamp[0])
    assert s.due()  # the first tick
    clock[0] += 0.05
    assert not s.due()  # nothing written since
    stamp[0] += 1
    assert s.due()
    clock[0] += brin.IDLE_PASS_S - 0.01
    assert not s.due()
    clock[0] += 0.02
    assert s.due()  # rows another process wrote are summarized within IDLE_PASS_S
    assert Summarizer(None, "m", lambda: "ix", 0.05).due() and Summarizer(None, "m", lambda: "ix", 0.05).due()


def test_the_archive_waits_count_the_batches_that_wrote_rows():
    waits = ArchiveWaits(sources=None, trigger_s=lambda: 1.0)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    assert waits.written("m") == 0
    waits.archived("m", AppendResult("m", 0, 0, 0, 0, False, (), None))  # an empty batch
    waits.archived("m", AppendResult("m", 1, 5, 0, 0, True, (), t))  # a replay, nothing written
    assert waits.written("m") == 0
    waits.archived("m", AppendResult("m", 2, 5, 0, 0, False, (3,), t))
    assert waits.written("m") == 1 and waits.written("other") == 0


def test_a_reader_s_path_does_not_start_passes_its_owner_stopped():
    """ensure() (what a batch's read calls) starts the passes, but not after stop(): a
    batch still running while its query stops would otherwise leave a thread summarizing
    a stream nobody reads, for as long as the process lives. start() restarts them."""
    s = Summarizer(None, "m", lambda: "ix", 30.0, written=lambda: 0)
    first = s.ensure()._thread
    assert first is not None and first.is_alive()
    assert s.ensure()._thread is first  # idempotent
    s.stop()
    assert s._thread is None and not first.is_alive()
    assert s.ensure()._thread is None
    again = s.start()._thread
    assert again is not None and again.is_alive() and again is not first
    s.stop()
