"""Admission control of the source kinds built on Spark's own readers (moirae.sources.bounds):
a backlog of files or rows is taken in bounded micro-batches, by default, in real Spark."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from moirae.sources import bounds
from moirae.sources.errors import InvalidSourceOption
from moirae.sources.kinds import kind

pytestmark = [pytest.mark.spark]


def _batch_sizes(df, timeout: float = 120.0, trigger: dict | None = None, stop_after: int | None = None) -> list[int]:
    """Rows per non-empty micro-batch of ``df`` (every file available now, or until
    ``stop_after`` batches with rows)."""
    sizes: dict[int, int] = {}

    def sink(batch, batch_id):
        n = batch.count()
        if n:
            sizes[batch_id] = n

    q = df.writeStream.foreachBatch(sink).trigger(**(trigger or {"availableNow": True})).start()
    try:
        t0 = time.monotonic()
        while q.isActive and time.monotonic() - t0 < timeout:
            if stop_after is not None and len(sizes) >= stop_after:
                break
            time.sleep(0.2)
    finally:
        q.stop()
    return [sizes[k] for k in sorted(sizes)]


def _csv_files(folder, n: int) -> None:
    folder.mkdir()
    for i in range(n):
        (folder / f"part-{i:03d}.csv").write_text(f"ts,v\n2026-01-01T00:00:{i:02d}Z,{i}\n")


def test_file_kind_bounds_a_backlog_by_default(spark, tmp_path, monkeypatch):
    _csv_files(tmp_path / "in", 5)
    monkeypatch.setattr(bounds, "DEFAULT_MAX_FILES", 2)  # the default, made small enough to see
    build = kind("file").build
    schema = "ts timestamp, v int"
    assert _batch_sizes(build(spark, {"path": str(tmp_path / "in")}, schema)) == [2, 2, 1]
    assert _batch_sizes(build(spark, {"path": str(tmp_path / "in"), "maxFilesPerTrigger": 3}, schema)) == [3, 2]
    assert _batch_sizes(build(spark, {"path": str(tmp_path / "in"), "maxFilesPerTrigger": 0}, schema)) == [5]


def test_receiver_inbox_bounds_requests_per_batch(spark, tmp_path, monkeypatch):
    from moirae.sources import prometheus
    from moirae.sources.inbox import Inbox

    monkeypatch.setattr(bounds, "DEFAULT_MAX_FILES", 2)
    df = prometheus.build(spark, {"name": "p", "data_dir": str(tmp_path)})
    inbox = Inbox.open(str(tmp_path), prometheus.KIND, "p")
    for i in range(5):  # five requests of one sample each
        inbox.write(pa.table({"ts": pa.array([i * 1_000_000], pa.timestamp("us", tz="UTC")), "metric": ["up"],
                              "value": [float(i)], "job": ["j"], "instance": ["i"], "labels": ["{}"]}))
    assert _batch_sizes(df) == [2, 2, 1]
    with pytest.raises(prometheus.RemoteWriteError, match="maxFilesPerTrigger"):
        prometheus.build(spark, {"name": "q", "data_dir": str(tmp_path), "maxFilesPerTrigger": "-1"})


def test_rate_kind_bounded_form_admits_rows_per_batch(spark):
    df = kind("rate").build(spark, {"rowsPerBatch": 7, "numPartitions": 1}, None)
    assert df.columns == ["timestamp", "value"]
    assert _batch_sizes(df, trigger={"processingTime": "200 milliseconds"}, stop_after=3)[:3] == [7, 7, 7]
    with pytest.raises(InvalidSourceOption, match="rowsPerSecond"):
        kind("rate").build(spark, {"rowsPerSecond": 10, "rowsPerBatch": 7}, None)


def test_bad_file_bound_names_the_option_and_value():
    with pytest.raises(InvalidSourceOption, match=r"maxFilesPerTrigger.*'-2'"):
        bounds.max_files({"maxFilesPerTrigger": "-2"}, "file source 'x'")
    with pytest.raises(InvalidSourceOption, match="maxFilesPerTrigger"):
        bounds.max_files({"maxFilesPerTrigger": True}, "file source 'x'")
