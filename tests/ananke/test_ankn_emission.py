"""When ANK-N emits, micro-batch by micro-batch (A 5.2: D, FO and the sorting Aggregate).

A sliding window (size 60 s, slide 20 s: each reading feeds three sink tuples) closes its
windows in different micro-batches. ANK-N's items are recorded per micro-batch next to
the watermark that micro-batch ran with (its progress' ``eventTime.watermark``):

- D holds every item until the watermark reaches its stamp: no item of a micro-batch is
  stamped after that micro-batch's watermark. A delay computed without holding the item
  (or a label emitted with its vertex but stamped later) fails here;
- FO emits each source vertex once, although the sink tuples naming it come in different
  micro-batches: a de-duplication within one micro-batch only fails here.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from ananke.ankn import AnkNSparkSink
from ananke.items import ListSink
from ananke.query import ProvQuery
from ananke.spark_adapter import progress_watermark
from tests.ananke.ank_helpers import at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "ts timestamp, k long, v long"


class _PerBatch(ListSink):
    """A GraphSink that also keeps each call's items apart (one call per micro-batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list] = []

    def __call__(self, items) -> None:
        super().__call__(items)
        self.calls.append(list(items))


def _batches():
    """Readings every 10 s for 6 minutes over two keys, one file per 40 s, then two flush rows."""
    rows = [dict(ts=at(8, 0) + timedelta(seconds=10 * i), k=i % 2, v=i) for i in range(36)]
    batches = [rows[i:i + 4] for i in range(0, len(rows), 4)]
    end = rows[-1]["ts"]
    return [*batches, [dict(ts=end + timedelta(hours=1), k=-1, v=0)], [dict(ts=end + timedelta(hours=2), k=-1, v=0)]]


class _Recording(AnkNSparkSink):
    """ANK-N's foreachBatch, noting which micro-batch each emit call came from."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.ids: list[int] = []

    def __call__(self, batch_df, batch_id: int) -> None:
        before = len(self.emit.calls)
        super().__call__(batch_df, batch_id)
        self.ids.extend([batch_id] * (len(self.emit.calls) - before))


@pytest.fixture
def ankn_run(spark, file_stream):
    from pyspark.sql import functions as F

    q = ProvQuery()
    src = q.source(file_stream(_batches(), SCHEMA), "readings", "ts", lateness="0 seconds")
    w = src.window(timedelta(seconds=60), timedelta(seconds=20), keys=["k"], aggs=[F.sum("v").alias("s")])
    every = w.window(timedelta(seconds=60), aggs=[F.count(F.lit(1)).alias("n")])
    out = _PerBatch()
    runner = _Recording([w.sink("w"), every.sink("all")], out)
    query = runner.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    marks = {p["batchId"]: progress_watermark(p) for p in query.recentProgress}
    return out, list(zip(runner.ids, out.calls, strict=True)), marks


def test_no_item_leaves_before_the_watermark_reaches_its_stamp(ankn_run):
    out, calls, marks = ankn_run
    assert {i.kind for i in out.items} == {"sink", "source", "edge", "label"}
    assert len(calls) > 2  # emitted over several micro-batches, not all at the end
    for batch_id, items in calls:
        wm = marks[batch_id]
        early = [i for i in items if wm is None or i.ts > wm]
        assert not early, f"micro-batch {batch_id} (watermark {wm}) emitted items stamped later: {early[:3]}"


def test_each_source_vertex_leaves_once_though_named_in_several_micro_batches(ankn_run):
    out, calls, marks = ankn_run
    counts = Counter(i.id for i in out.items if i.kind == "source")
    assert counts and max(counts.values()) == 1, "FO emitted a source vertex twice"
    # the premise: some source tuples are named by sink tuples emitted in different micro-batches
    batch_of = {i.id: b for b, items in calls for i in items if i.kind == "sink"}
    edges = {}
    for _b, items in calls:
        for e in (i for i in items if i.kind == "edge"):
            edges.setdefault(e.source_id, set()).add(batch_of[e.sink_id])
    assert any(len(bs) > 1 for bs in edges.values())
    labels = Counter((i.vertex_kind, i.vertex_id) for i in out.items if i.kind == "label")
    assert max(labels.values()) == 1 and {k for k, _ in labels} == {"source", "sink"}


def test_a_source_label_follows_every_edge_of_its_source(ankn_run):
    """R-L as a live consumer sees it: by the micro-batch that labels a source expired,
    every edge naming it has been delivered (in that micro-batch or before)."""
    out, calls, marks = ankn_run
    last_edge_batch: dict[int, int] = {}
    for n, (_, items) in enumerate(calls):
        for e in (i for i in items if i.kind == "edge"):
            last_edge_batch[e.source_id] = n
    for n, (_, items) in enumerate(calls):
        for lab in (i for i in items if i.kind == "label" and i.vertex_kind == "source"):
            assert last_edge_batch[lab.vertex_id] <= n, f"source {lab.vertex_id} labelled before its last edge"
