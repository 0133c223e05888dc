"""ANK-1 (A 5.1, Algorithm 1) at unit level: the running example worked out by hand.

U = 15 min (both queries of A fig. 3 have one 15-minute window). Sink tuples, as Q1/Q2
would produce them from cars reporting every 5 minutes:

    a1 (K1, 8:15) <- t1@8:00, t1@8:05, t1@8:10   (car 1 stayed in region R)
    a2 (K2, 8:10) <- t2@8:00, t2@8:05            (car 2 too fast)
    a3 (K2, 8:15) <- t2@8:05, t2@8:10            (shares t2@8:05 with a2)
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.ank1 import Ank1, UnknownSinkName
from ananke.items import Edge, Label, ListSink, SinkTuple, SinkVertex, SourceVertex
from moirae.base.errors import MoiraeError
from tests.ananke.ank_helpers import at

U = timedelta(minutes=15)
T1 = {0: 101, 5: 102, 10: 103}  # source ids of car 1's reports at 8:00, 8:05, 8:10
T2 = {0: 201, 5: 202, 10: 203}
A1, A2, A3 = SinkTuple(1, at(8, 15), {"car": 1}), SinkTuple(2, at(8, 10), {"car": 2}), SinkTuple(3, at(8, 15), {"car": 2})


def test_running_example_exact_graph_stream():
    out = ListSink()
    horizons = []
    ank = Ank1(("K1", "K2"), U).build(out, on_horizon=horizons.append)
    assert ank.horizon() is None and ank.watermark() is None
    assert ank.on_watermark("K1", at(8, 10)) == []
    assert ank.on_watermark("K2", at(8, 10)) == []  # W = 8:10, T empty
    w = at(8, 10)
    assert ank.on_tuple("K2", A2, [(T2[0], at(8, 0)), (T2[5], at(8, 5))]) == [
        SinkVertex(2, "K2", at(8, 10), w), SourceVertex(201, at(8, 0), w), Edge(201, 2, w),
        SourceVertex(202, at(8, 5), w), Edge(202, 2, w), Label(2, "sink", w)]
    assert ank.on_tuple("K1", A1, [(T1[m], at(8, m)) for m in (0, 5, 10)]) == [
        SinkVertex(1, "K1", at(8, 15), w), SourceVertex(101, at(8, 0), w), Edge(101, 1, w),
        SourceVertex(102, at(8, 5), w), Edge(102, 1, w), SourceVertex(103, at(8, 10), w), Edge(103, 1, w),
        Label(1, "sink", w)]
    assert ank.on_watermark("K2", at(8, 15)) == []  # W = min(8:10, 8:15): unchanged
    # t2@8:05 was emitted with a2: only its edge this time (R-V)
    assert ank.on_tuple("K2", A3, [(T2[5], at(8, 5)), (T2[10], at(8, 10))]) == [
        SinkVertex(3, "K2", at(8, 15), w), Edge(202, 3, w), SourceVertex(203, at(8, 10), w), Edge(203, 3, w),
        Label(3, "sink", w)]
    assert ank.state_size() == 6
    assert ank.on_watermark("K1", at(8, 20)) == []  # W = 8:15, W - U = 8:00: nothing older
    assert ank.horizon() == at(8, 0)
    assert ank.on_watermark("K1", at(8, 25)) == []  # W still 8:15 (K2 lags)
    w = at(8, 21)
    assert ank.on_watermark("K2", w) == [Label(101, "source", w), Label(201, "source", w),
                                          Label(102, "source", w), Label(202, "source", w)]
    assert ank.state_size() == 2 and ank.horizon() == at(8, 6)
    assert ank.on_watermark("K2", at(8, 30)) == []  # W = min(8:25, 8:30) = 8:25 -> 8:10 not < 8:10
    w = at(8, 30)
    assert ank.on_watermark("K1", w) == [Label(103, "source", w), Label(203, "source", w)]
    assert ank.state_size() == 0
    assert horizons == [at(7, 55), at(8, 0), at(8, 6), at(8, 10), at(8, 15)]
    # a late sink tuple (older than its sink's watermark) is refused and counted
    assert ank.on_tuple("K1", SinkTuple(9, at(8, 20), {}), [(T1[10], at(8, 10))]) == []
    assert ank.stats.late == 1
    # the GraphSink received every item once: 3 sinks, 6 sources, 7 edges, 9 labels
    kinds = [i.kind for i in out.items]
    assert (kinds.count("sink"), kinds.count("source"), kinds.count("edge"), kinds.count("label")) == (3, 6, 7, 9)


def test_watermarks_never_go_back_and_unknown_sinks_are_refused():
    ank = Ank1(("K",), U).build()
    ank.on_watermark("K", at(9, 0))
    ank.on_watermark("K", at(8, 0))
    assert ank.watermark() == at(9, 0)
    with pytest.raises(UnknownSinkName, match="'Q'"):
        ank.on_tuple("Q", A1, [])
    with pytest.raises(MoiraeError, match="naive"):
        ank.on_watermark("K", at(9, 5).replace(tzinfo=None))


def test_zero_u_labels_sources_as_soon_as_the_watermark_passes_them():
    out = ListSink()
    ank = Ank1(("K",), timedelta(0)).build(out)
    ank.on_tuple("K", SinkTuple(1, at(8, 0)), [(10, at(8, 0))])
    assert ank.on_watermark("K", at(8, 0)) == []
    assert ank.on_watermark("K", at(8, 0, 0, 1)) == [Label(10, "source", at(8, 0, 0, 1))]
